# imgbuild layer cpu-env (kind runtime-env). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV OMP_NUM_THREADS="2"

LABEL io.imgbuild.layer="cpu-env" \
      io.imgbuild.kind="runtime-env"