# imgbuild layer nccl-ib (kind runtime-env). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# One time for every file this layer writes (docs/reproducible.md): pip compiles checked-hash .pyc, and an
# engine that can fix file times (Buildah --timestamp) stamps the layer with it. From site.source_date_epoch.
# One hash seed for every Python the build runs: a set a setup.py iterates (DeepSpeed's extras) is then
# written in one order. Both are build arguments: in the key, never in the image's environment.
ARG SOURCE_DATE_EPOCH=315532800
ARG PYTHONHASHSEED=0

ENV NCCL_DEBUG="WARN" \
    NCCL_IB_DISABLE="0" \
    NCCL_IB_HCA="mlx5" \
    NCCL_SOCKET_IFNAME="^lo,docker0" \
    XLA_PYTHON_CLIENT_MEM_FRACTION="0.9"

LABEL io.imgbuild.layer="nccl-ib" \
      io.imgbuild.kind="runtime-env"