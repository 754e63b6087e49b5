# imgbuild layer nvshmem-link (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN mkdir -p "$(dirname /usr/local/lib/python3.12/dist-packages/nvidia/nvshmem/lib/libnvshmem_host.so)" && ln -sfn /usr/local/lib/python3.12/dist-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3 /usr/local/lib/python3.12/dist-packages/nvidia/nvshmem/lib/libnvshmem_host.so
ENV NVTE_BUILD_NUM_PHILOX_ROUNDS="3"

LABEL io.imgbuild.layer="nvshmem-link" \
      io.imgbuild.kind="system-setup"