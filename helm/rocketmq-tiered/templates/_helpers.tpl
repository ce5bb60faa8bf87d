{{/* Names ------------------------------------------------------------------------------------ */}}

{{- define "rocketmq-tiered.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name; 52 characters at most so that "-headless" etc. still fit. */}}
{{- define "rocketmq-tiered.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "rocketmq-tiered.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rocketmq-tiered.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "rocketmq-tiered.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "rocketmq-tiered.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The pod label the API Service selects: added to the broker pods in both modes (a key of our
own, so it never collides with the labels another chart selects its pods by). */}}
{{- define "rocketmq-tiered.podLabelKey" -}}rocketmq-tiered/sidecar{{- end }}

{{- define "rocketmq-tiered.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rocketmq-tiered.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "rocketmq-tiered.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret holding the S3 keys, or "" when the pod's AWS credential chain is used. */}}
{{- define "rocketmq-tiered.secretName" -}}
{{- if .Values.s3Credentials.existingSecret }}
{{- .Values.s3Credentials.existingSecret }}
{{- else if .Values.s3Credentials.accessKey }}
{{- printf "%s-s3" (include "rocketmq-tiered.fullname" .) }}
{{- end }}
{{- end }}

{{/* Security (docs/guides/security.md): where the accounts and the certificate are mounted, and the
Secrets they come from. Mounted as whole Secret volumes (never subPath): kubelet swaps the files in
place when a Secret changes and the sidecar reloads them. */}}
{{- define "rocketmq-tiered.aclDir" -}}/etc/rmq-tiered-acl{{- end }}
{{- define "rocketmq-tiered.tlsDir" -}}/etc/rmq-tiered-tls{{- end }}

{{/* The Secret holding the accounts (plain_acl.yml): an existing one or <fullname>-acl. */}}
{{- define "rocketmq-tiered.aclSecretName" -}}
{{- default (printf "%s-acl" (include "rocketmq-tiered.fullname" .)) .Values.security.acl.existingSecret }}
{{- end }}

{{/* The kubernetes.io/tls Secret: an existing one, the cert-manager Certificate's, or "". */}}
{{- define "rocketmq-tiered.tlsSecretName" -}}
{{- if .Values.security.tls.existingSecret }}
{{- .Values.security.tls.existingSecret }}
{{- else if .Values.security.tls.certManager.enabled }}
{{- printf "%s-tls" (include "rocketmq-tiered.fullname" .) }}
{{- end }}
{{- end }}

{{/* "true" when either port serves TLS (the certificate is mounted and configured). */}}
{{- define "rocketmq-tiered.tlsOn" -}}
{{- if or (ne .Values.security.tls.httpMode "disabled") (ne .Values.security.tls.remotingMode "disabled") }}true{{ end }}
{{- end }}

{{/* The ports the chart puts on a Service with neither ACL nor enforcing TLS (permissive TLS
still takes plaintext): "" when every exposed port is secured. */}}
{{- define "rocketmq-tiered.insecurePorts" -}}
{{- $acl := .Values.security.acl.enabled }}
{{- $ports := list }}
{{- if not (or $acl (eq .Values.security.tls.httpMode "enforcing")) }}
{{- $ports = append $ports (printf "the HTTP port (http.port %d; fix: security.tls.httpMode=enforcing)" (int .Values.http.port)) }}
{{- end }}
{{- if and .Values.remoting.enabled .Values.remoting.service.enabled (not (or $acl (eq .Values.security.tls.remotingMode "enforcing"))) }}
{{- $ports = append $ports (printf "the replay port (remoting.port %d; fix: security.tls.remotingMode=enforcing, or remoting.service.enabled=false)" (int .Values.remoting.port)) }}
{{- end }}
{{- join " and " $ports }}
{{- end }}

{{/* A value as a properties file spells it. Helm hands numbers to templates as float64 (from
JSON) or int64 (from --set); whole floats must not come out as 1.073741824e+09. */}}
{{- define "rocketmq-tiered.prop" -}}
{{- if and (kindIs "float64" .) (eq . (floor .)) }}
{{- int64 . }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/* Checks JSON schema cannot express (they compare two values). */}}
{{- define "rocketmq-tiered.validate" -}}
{{- $store := printf "%s/" (trimSuffix "/" .Values.broker.store.mountPath) }}
{{- $data := printf "%s/" (trimSuffix "/" .Values.data.mountPath) }}
{{- if or (hasPrefix $store $data) (hasPrefix $data $store) }}
{{- fail (printf "data.mountPath %q and broker.store.mountPath %q overlap: the sidecar never writes to the broker store; give data.mountPath a directory outside it" .Values.data.mountPath .Values.broker.store.mountPath) }}
{{- end }}
{{- range $fixed := list "/etc/rmq-tiered/" "/etc/rocketmq/" "/tmp/" "/etc/rmq-tiered-acl/" "/etc/rmq-tiered-tls/" }}
{{- range $name, $path := dict "broker.store.mountPath" $store "data.mountPath" $data }}
{{- if or (hasPrefix $fixed $path) (hasPrefix $path $fixed) }}
{{- fail (printf "%s %q overlaps %s, which the chart mounts itself: choose another directory" $name (trimSuffix "/" $path) (trimSuffix "/" $fixed)) }}
{{- end }}
{{- end }}
{{- end }}
{{- if eq (int .Values.remoting.port) 10911 10909 10912 (int .Values.http.port) }}
{{- fail (printf "remoting.port %d is a broker port (10909, 10911, 10912) or http.port: choose another, e.g. 10941" (int .Values.remoting.port)) }}
{{- end }}
{{- if eq (int .Values.http.port) 10911 10909 10912 }}
{{- fail (printf "http.port %d is a broker port (10909, 10911, 10912): choose another, e.g. 8081" (int .Values.http.port)) }}
{{- end }}
{{- include "rocketmq-tiered.validateSecurity" . }}
{{- end }}

{{/* Security settings that only make sense together (docs/guides/security.md). */}}
{{- define "rocketmq-tiered.validateSecurity" -}}
{{- $sec := .Values.security }}
{{- with include "rocketmq-tiered.insecurePorts" . }}
{{- if not $sec.allowInsecure }}
{{- fail (printf "%s would be on Service %s with neither ACL nor enforcing TLS: anyone who reaches it reads every message. Secure it with security.acl.enabled=true (accounts in security.acl.accounts or security.acl.existingSecret) or with enforcing TLS (a certificate from security.tls.existingSecret or security.tls.certManager), or set security.allowInsecure=true to accept that" . (include "rocketmq-tiered.fullname" $)) }}
{{- end }}
{{- end }}
{{- if and (include "rocketmq-tiered.tlsOn" .) (not (include "rocketmq-tiered.tlsSecretName" .)) }}
{{- fail (printf "security.tls.httpMode=%s and security.tls.remotingMode=%s need a certificate: set security.tls.existingSecret (a kubernetes.io/tls Secret) or security.tls.certManager.enabled=true with security.tls.certManager.issuerRef" $sec.tls.httpMode $sec.tls.remotingMode) }}
{{- end }}
{{- if and (include "rocketmq-tiered.tlsSecretName" .) (not (include "rocketmq-tiered.tlsOn" .)) }}
{{- fail "security.tls has a certificate (existingSecret or certManager) but httpMode and remotingMode are both disabled: set one to permissive or enforcing, or drop the certificate" }}
{{- end }}
{{- if and $sec.tls.mutual (not (include "rocketmq-tiered.tlsOn" .)) }}
{{- fail "security.tls.mutual needs TLS on a port: set security.tls.remotingMode (or httpMode=permissive) to permissive or enforcing" }}
{{- end }}
{{- if and $sec.tls.mutual (eq $sec.tls.httpMode "enforcing") }}
{{- fail "security.tls.mutual with security.tls.httpMode=enforcing: the kubelet's /healthz and /readyz probes cannot present a client certificate. Use httpMode=permissive with security.acl.enabled=true, or mutual TLS on the replay port only (httpMode=disabled)" }}
{{- end }}
{{- if and $sec.metricsAuth (not $sec.acl.enabled) }}
{{- fail "security.metricsAuth puts /metrics behind an account: it needs security.acl.enabled=true" }}
{{- end }}
{{- if and $sec.metricsAuth .Values.metrics.serviceMonitor.enabled (not .Values.metrics.serviceMonitor.basicAuthSecret) }}
{{- fail "security.metricsAuth with metrics.serviceMonitor.enabled: set metrics.serviceMonitor.basicAuthSecret (a Secret with keys username and password, an account of the accounts file) so Prometheus can scrape /metrics" }}
{{- end }}
{{- end }}

{{/* tiered.conf: the sidecar's keys (the ConfigMap's one file). */}}
{{- define "rocketmq-tiered.tieredConf" -}}
# Generated by the {{ .Chart.Name }} chart {{ .Chart.Version }}. Every key, its meaning, default and
# unit: config/tiered.conf. brokerName and brokerId come from the environment (RMQ_TIERED_*).
brokerClusterName={{ .Values.broker.clusterName }}
brokerRole={{ .Values.broker.role }}
storePathRootDir={{ .Values.broker.store.mountPath }}
mappedFileSizeCommitLog={{ include "rocketmq-tiered.prop" .Values.broker.mappedFileSizeCommitLog }}
mappedFileSizeConsumeQueue={{ include "rocketmq-tiered.prop" .Values.broker.mappedFileSizeConsumeQueue }}
tieredDataDir={{ .Values.data.mountPath }}
tieredHttpHost=0.0.0.0
tieredHttpPort={{ include "rocketmq-tiered.prop" .Values.http.port }}
tieredRemotingEnable={{ .Values.remoting.enabled }}
tieredRemotingHost=0.0.0.0
tieredRemotingPort={{ include "rocketmq-tiered.prop" .Values.remoting.port }}
{{- with .Values.remoting.namesrvAddr }}
tieredRemotingNamesrvAddr={{ . }}
{{- end }}
{{- with .Values.remoting.peers }}
tieredRemotingPeers={{ join "," . }}
{{- end }}
tieredAclEnable={{ .Values.security.acl.enabled }}
{{- if .Values.security.acl.enabled }}
tieredAclFile={{ include "rocketmq-tiered.aclDir" . }}/plain_acl.yml
tieredHttpMetricsAuth={{ .Values.security.metricsAuth }}
{{- end }}
tieredHttpTlsMode={{ .Values.security.tls.httpMode }}
tieredRemotingTlsMode={{ .Values.security.tls.remotingMode }}
{{- if include "rocketmq-tiered.tlsOn" . }}
tieredTlsCertFile={{ include "rocketmq-tiered.tlsDir" . }}/tls.crt
tieredTlsKeyFile={{ include "rocketmq-tiered.tlsDir" . }}/tls.key
{{- if .Values.security.tls.mutual }}
tieredTlsClientCaFile={{ include "rocketmq-tiered.tlsDir" . }}/ca.crt
{{- end }}
{{- end }}
{{- range $key, $value := .Values.config }}
{{ $key }}={{ include "rocketmq-tiered.prop" $value }}
{{- end }}
{{- end }}

{{/* broker.conf (statefulset mode): the broker's own configuration; the sidecar reads it too. */}}
{{- define "rocketmq-tiered.brokerConf" -}}
# Generated by the {{ .Chart.Name }} chart {{ .Chart.Version }}. Pods other than 0 start with
# brokerId=<ordinal> and brokerRole=SLAVE appended.
brokerClusterName={{ .Values.broker.clusterName }}
brokerName={{ .Values.broker.name }}
brokerId=0
brokerRole={{ .Values.broker.role }}
namesrvAddr={{ .Values.broker.namesrvAddr }}
storePathRootDir={{ .Values.broker.store.mountPath }}
mappedFileSizeCommitLog={{ include "rocketmq-tiered.prop" .Values.broker.mappedFileSizeCommitLog }}
mappedFileSizeConsumeQueue={{ include "rocketmq-tiered.prop" .Values.broker.mappedFileSizeConsumeQueue }}
flushDiskType={{ .Values.broker.flushDiskType }}
{{- range $key, $value := .Values.broker.config }}
{{ $key }}={{ include "rocketmq-tiered.prop" $value }}
{{- end }}
{{- end }}

{{/* The sidecar container (a list item), shared by the StatefulSet and the sidecar patch. */}}
{{- define "rocketmq-tiered.container" -}}
- name: {{ .Values.sidecar.containerName }}
  image: {{ include "rocketmq-tiered.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    - run
    {{- if eq .Values.mode "statefulset" }}
    - --config
    - /etc/rocketmq/broker.conf
    {{- end }}
    - --config
    - /etc/rmq-tiered/tiered.conf
    {{- range .Values.sidecar.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    - name: RMQ_TIERED_tieredRemotingAdvertisedAddress
      value: "$(POD_IP):{{ include "rocketmq-tiered.prop" .Values.remoting.port }}"
    - name: POD_INDEX
      valueFrom:
        fieldRef:
          fieldPath: metadata.labels['apps.kubernetes.io/pod-index']
    - name: RMQ_TIERED_brokerName
      value: {{ .Values.broker.name | quote }}
    - name: RMQ_TIERED_brokerId
      value: {{ ternary "$(POD_INDEX)" (toString .Values.broker.id) (eq .Values.mode "statefulset") | quote }}
    {{- with include "rocketmq-tiered.secretName" . }}
    - name: RMQ_TIERED_objectStoreAccessKey
      valueFrom:
        secretKeyRef:
          name: {{ . }}
          key: {{ $.Values.s3Credentials.accessKeyKey }}
    - name: RMQ_TIERED_objectStoreSecretKey
      valueFrom:
        secretKeyRef:
          name: {{ . }}
          key: {{ $.Values.s3Credentials.secretKeyKey }}
    {{- end }}
    {{- with .Values.sidecar.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: http
      containerPort: {{ include "rocketmq-tiered.prop" .Values.http.port }}
      protocol: TCP
    {{- if .Values.remoting.enabled }}
    - name: remoting
      containerPort: {{ include "rocketmq-tiered.prop" .Values.remoting.port }}
      protocol: TCP
    {{- end }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: http
      {{- if eq .Values.security.tls.httpMode "enforcing" }}
      scheme: HTTPS
      {{- end }}
    {{- toYaml .Values.sidecar.livenessProbe | nindent 4 }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: http
      {{- if eq .Values.security.tls.httpMode "enforcing" }}
      scheme: HTTPS
      {{- end }}
    {{- toYaml .Values.sidecar.readinessProbe | nindent 4 }}
  resources:
    {{- toYaml .Values.sidecar.resources | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    runAsUser: {{ include "rocketmq-tiered.prop" .Values.broker.uid }}
    runAsGroup: {{ include "rocketmq-tiered.prop" .Values.broker.gid }}
    allowPrivilegeEscalation: false
    privileged: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: [ALL]
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    - name: {{ .Values.broker.store.volumeName }}
      mountPath: {{ .Values.broker.store.mountPath }}
      {{- with .Values.broker.store.subPath }}
      subPath: {{ . }}
      {{- end }}
      readOnly: true
    {{- if eq .Values.mode "statefulset" }}
    - name: broker-config
      mountPath: /etc/rocketmq
      readOnly: true
    {{- end }}
    - name: rmq-tiered-config
      mountPath: /etc/rmq-tiered
      readOnly: true
    - name: rmq-tiered-data
      mountPath: {{ .Values.data.mountPath }}
    - name: rmq-tiered-tmp
      mountPath: /tmp
    {{- if .Values.security.acl.enabled }}
    - name: rmq-tiered-acl
      mountPath: {{ include "rocketmq-tiered.aclDir" . }}
      readOnly: true
    {{- end }}
    {{- if include "rocketmq-tiered.tlsOn" . }}
    - name: rmq-tiered-tls
      mountPath: {{ include "rocketmq-tiered.tlsDir" . }}
      readOnly: true
    {{- end }}
    {{- with .Values.sidecar.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/* The sidecar's volumes (list items); the store volume belongs to the broker's pod. */}}
{{- define "rocketmq-tiered.volumes" -}}
- name: rmq-tiered-config
  configMap:
    name: {{ include "rocketmq-tiered.fullname" . }}-config
{{- if not (and (eq .Values.mode "statefulset") .Values.data.persistence.enabled) }}
- name: rmq-tiered-data
  {{- toYaml .Values.data.volume | nindent 2 }}
{{- end }}
{{ include "rocketmq-tiered.moreVolumes" . }}
{{- end }}

{{/* The replica's volumes: the sidecar's, with an emptyDir of its own as its data dir. */}}
{{- define "rocketmq-tiered.replicaVolumes" -}}
- name: rmq-tiered-config
  configMap:
    name: {{ include "rocketmq-tiered.fullname" . }}-config
- name: rmq-tiered-data
  emptyDir: {}
{{ include "rocketmq-tiered.moreVolumes" . }}
{{- end }}

{{/* The volumes after the config and data ones: scratch, accounts, certificate, extra. */}}
{{- define "rocketmq-tiered.moreVolumes" -}}
- name: rmq-tiered-tmp
  emptyDir:
    sizeLimit: {{ .Values.tmp.sizeLimit }}
{{- if .Values.security.acl.enabled }}
# the accounts: a whole Secret volume (no subPath), so a changed Secret reaches the sidecar
- name: rmq-tiered-acl
  secret:
    secretName: {{ include "rocketmq-tiered.aclSecretName" . }}
    items:
      - key: {{ ternary .Values.security.acl.existingSecretKey "plain_acl.yml" (ne .Values.security.acl.existingSecret "") }}
        path: plain_acl.yml
{{- end }}
{{- if include "rocketmq-tiered.tlsOn" . }}
# the certificate (kubernetes.io/tls), likewise updated in place when renewed
- name: rmq-tiered-tls
  secret:
    secretName: {{ include "rocketmq-tiered.tlsSecretName" . }}
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
      {{- if .Values.security.tls.mutual }}
      - key: ca.crt
        path: ca.crt
      {{- end }}
{{- end }}
{{- with .Values.sidecar.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* A volumeClaimTemplate (dict "name" "spec" (persistence values)). */}}
{{- define "rocketmq-tiered.claim" -}}
- metadata:
    name: {{ .name }}
  spec:
    accessModes:
      {{- toYaml .spec.accessModes | nindent 6 }}
    {{- if eq .spec.storageClass "-" }}
    storageClassName: ""
    {{- else if .spec.storageClass }}
    storageClassName: {{ .spec.storageClass }}
    {{- end }}
    resources:
      requests:
        storage: {{ .spec.size }}
{{- end }}

{{/* "true" when the shared objects (ConfigMap, Secret, Service, ...) are rendered: always in
statefulset mode; in sidecar mode unless only the patch is asked for. */}}
{{- define "rocketmq-tiered.emitResources" -}}
{{- if or (eq .Values.mode "statefulset") (eq .Values.sidecar.emit "resources") }}true{{ end }}
{{- end }}

{{/* The strategic-merge patch that adds the sidecar to a broker StatefulSet (sidecar mode). */}}
{{- define "rocketmq-tiered.sidecarPatch" -}}
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .Values.sidecar.targetStatefulSet }}
spec:
  template:
    metadata:
      labels:
        {{ include "rocketmq-tiered.podLabelKey" . }}: {{ include "rocketmq-tiered.fullname" . }}
    spec:
      {{- with include "rocketmq-tiered.serviceAccountName" . }}
      serviceAccountName: {{ . }}
      {{- end }}
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        {{- include "rocketmq-tiered.container" . | nindent 8 }}
      volumes:
        {{- include "rocketmq-tiered.volumes" . | nindent 8 }}
{{- end }}
