#!/bin/sh
# Helm post-renderer: adds the rocketmq-tiered sidecar to a broker chart's StatefulSet.
# Reads the chart's rendered manifests on stdin, writes the kustomized result to stdout.
# Needs kustomize (or kubectl >= 1.21) on PATH, and tiered.yaml and sidecar/kustomization.yaml
# beside this script (kustomization.yaml shows the two commands that make them).
set -eu
here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/sidecar"
cp "$here/kustomization.yaml" "$here/tiered.yaml" "$work/"
cp "$here/sidecar/kustomization.yaml" "$work/sidecar/"
cat > "$work/broker.yaml"
if command -v kustomize > /dev/null 2>&1; then
    kustomize build "$work"
else
    kubectl kustomize "$work"
fi
