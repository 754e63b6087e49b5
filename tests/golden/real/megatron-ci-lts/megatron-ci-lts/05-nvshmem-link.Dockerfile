# imgbuild layer nvshmem-link (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN mkdir -p "$(dirname /opt/venv/lib/python3.12/site-packages/nvidia/nvshmem/lib/libnvshmem_host.so)" && ln -sfn /opt/venv/lib/python3.12/site-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3 /opt/venv/lib/python3.12/site-packages/nvidia/nvshmem/lib/libnvshmem_host.so

LABEL io.imgbuild.layer="nvshmem-link" \
      io.imgbuild.kind="system-setup"