# imgbuild layer nccl-tests-2.19.6 (kind nccl-tests). Rendered from Dockerfile.j2; do not edit.
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
ARG TORCH_CUDA_ARCH_LIST="9.0"
ARG NVTE_CUDA_ARCHS="90"
ARG CMAKE_CUDA_ARCHITECTURES="90"

COPY sources/source /opt/imgbuild/sources/nccl-tests
RUN mkdir -p /usr/local/libexec/imgbuild; \
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
    for tool in make g++ nvcc; do \
        command -v "$tool" >/dev/null || { echo "nccl-tests: $tool is not in the image (make and g++: the layer's apt; nvcc: the CUDA beneath)" >&2; exit 1; }; \
    done; \
    nccl_home=''; lib=; \
    for d in ${nccl_home:-/usr/local/cuda /usr /usr/local/nccl $(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)}; do \
        lib=$(ls "$d"/lib/libnccl.so* "$d"/lib64/libnccl.so* "$d"/lib/*/libnccl.so* 2>/dev/null | head -n 1); \
        if [ -f "$d/include/nccl.h" ] && [ -n "$lib" ]; then nccl_home=$d; break; fi; lib=; \
    done; \
    [ -n "$lib" ] || { echo "nccl-tests: no NCCL (include/nccl.h and lib/libnccl.so*) in ${nccl_home:-/usr/local/cuda, /usr, /usr/local/nccl or the nvidia.nccl package}: install it beneath this layer or set nccl_home" >&2; exit 1; }; \
    echo "nccl-tests: NCCL from $nccl_home ($lib)"; \
    mkdir -p /tmp/imgbuild-nccl/lib && ln -s "$nccl_home/include" /tmp/imgbuild-nccl/include && ln -s "$lib" /tmp/imgbuild-nccl/lib/libnccl.so \
 && cd /opt/imgbuild/sources/nccl-tests \
 && { grep -q '^#define NCCL_TESTS_VERSION "2.19.6"' src/common.h \
      || { echo "nccl-tests: the commit declares $(grep -h '^#define NCCL_TESTS_VERSION' src/common.h || echo 'no version'), not 2.19.6" >&2; exit 1; }; } \
 && make -C src -j 4 BUILDDIR=/tmp/imgbuild-nccl-tests NCCL_HOME=/tmp/imgbuild-nccl \
      NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 \
 /tmp/imgbuild-nccl-tests/all_reduce_perf /tmp/imgbuild-nccl-tests/all_gather_perf /tmp/imgbuild-nccl-tests/reduce_scatter_perf /tmp/imgbuild-nccl-tests/alltoall_perf \
 && install -d /opt/nccl-tests/bin \
 && install -m 755 /tmp/imgbuild-nccl-tests/all_reduce_perf /tmp/imgbuild-nccl-tests/all_gather_perf /tmp/imgbuild-nccl-tests/reduce_scatter_perf /tmp/imgbuild-nccl-tests/alltoall_perf /opt/nccl-tests/bin \
 && rm -rf /tmp/imgbuild-nccl-tests /tmp/imgbuild-nccl \
 && if ldd /opt/nccl-tests/bin/all_reduce_perf | grep 'libnccl.* not found' >/dev/null; then \
        dirname "$(readlink -f "$lib")" > /etc/ld.so.conf.d/imgbuild-nccl-tests.conf && ldconfig; \
    fi
ENV PATH="/opt/nccl-tests/bin${PATH:+:${PATH}}"

# What records when, or in what order, this build ran leaves the layer: installer logs and the caches
# that hold times or inode numbers. Nothing a program reads at run time.
RUN rm -rf /var/log/apt/*.log /var/log/apt/eipp.log.xz /var/log/dpkg.log /var/log/alternatives.log \
        /var/cache/apt/*.bin /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old /var/lib/dpkg/*-old

LABEL io.imgbuild.layer="nccl-tests-2.19.6" \
      io.imgbuild.kind="nccl-tests" \
      io.imgbuild.cuda-arch-list="9.0" \
      io.imgbuild.source.source="https://github.com/NVIDIA/nccl-tests.git@a0b82b2260cf5152b9f8c061bbf7eaf0ba096432"