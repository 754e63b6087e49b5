# imgbuild layer nccl-ib (kind runtime-env). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV CUDA_DEVICE_MAX_CONNECTIONS="1" \
    NCCL_DEBUG="WARN" \
    NCCL_IB_DISABLE="0" \
    NCCL_IB_GID_INDEX="3" \
    NCCL_IB_HCA="mlx5" \
    NCCL_SOCKET_IFNAME="^lo,docker0"

LABEL io.imgbuild.layer="nccl-ib" \
      io.imgbuild.kind="runtime-env"