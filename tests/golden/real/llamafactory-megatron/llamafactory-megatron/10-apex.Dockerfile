# imgbuild layer apex (kind apex). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# One time for every file this layer writes (docs/reproducible.md): pip compiles checked-hash .pyc, and an
# engine that can fix file times (Buildah --timestamp) stamps the layer with it. From site.source_date_epoch.
# One hash seed for every Python the build runs: a set a setup.py iterates (DeepSpeed's extras) is then
# written in one order. Both are build arguments: in the key, never in the image's environment.
ARG SOURCE_DATE_EPOCH=315532800
ARG PYTHONHASHSEED=0
# Target GPUs: one arch list, spelled for each build tool (TORCH_CUDA_ARCH_LIST, TE, CMake).
ARG TORCH_CUDA_ARCH_LIST="8.0;9.0"
ARG NVTE_CUDA_ARCHS="80;90"
ARG CMAKE_CUDA_ARCHITECTURES="80;90"

COPY sources/source /opt/imgbuild/sources/apex
RUN --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle \
    --mount=type=secret,id=pip-index-url,target=/run/secrets/pip-index-url \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    --mount=type=cache,id=imgbuild-pip,target=/root/.cache/pip,sharing=locked \
    rm -rf /root/.cache/pip/wheels; \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle SSL_CERT_FILE=/run/secrets/ca-bundle; fi; \
    if [ -s /run/secrets/pip-index-url ]; then PIP_INDEX_URL="$(cat /run/secrets/pip-index-url)"; export PIP_INDEX_URL; fi; \
    mkdir -p /usr/local/libexec/imgbuild; \
    for cc in gcc g++; do \
        printf '%s\n' '#!/bin/sh' \
            '# imgbuild: compiles for the CPU baseline x86-64-v3, never for the build host (docs/cpu-baseline.md)' \
            'for a do shift; case "$a" in' \
            '    -march=native|-mcpu=native) set -- "$@" -march=x86-64-v3 ;;' \
            '    -mtune=native) set -- "$@" -mtune=generic ;;' \
            '    -D__AVX512__|-D__AVX256__|-D__SVE__|-D__NEON__|-D__SCALAR__) set -- "$@" -D__AVX256__ ;;' \
            '    *) set -- "$@" "$a" ;;' \
            'esac; done' \
            "exec $cc \"\$@\"" > /usr/local/libexec/imgbuild/$cc \
     && chmod 755 /usr/local/libexec/imgbuild/$cc; \
    done; \
    export CC=/usr/local/libexec/imgbuild/gcc CXX=/usr/local/libexec/imgbuild/g++ \
        CFLAGS='-march=x86-64-v3 -mtune=generic' CXXFLAGS='-march=x86-64-v3 -mtune=generic'; \
    cd /opt/imgbuild/sources/apex \
 && APEX_CPP_EXT=1 APEX_CUDA_EXT=1 \
    MAX_JOBS=32 NVCC_APPEND_FLAGS="--threads 4" \
    python -m pip install -v --progress-bar off --no-build-isolation \
        --config-settings '--build-option=--cpp_ext --cuda_ext' . \
 && rm -rf build

# What records when, or in what order, this build ran leaves the layer: installer logs and the caches
# that hold times or inode numbers. Nothing a program reads at run time.
RUN rm -rf /var/log/apt/*.log /var/log/apt/eipp.log.xz /var/log/dpkg.log /var/log/alternatives.log \
        /var/cache/apt/*.bin /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old /var/lib/dpkg/*-old

LABEL io.imgbuild.layer="apex" \
      io.imgbuild.kind="apex" \
      io.imgbuild.cuda-arch-list="8.0;9.0" \
      io.imgbuild.source.source="https://github.com/NVIDIA/apex.git@"