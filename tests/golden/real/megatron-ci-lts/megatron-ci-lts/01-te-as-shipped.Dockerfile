# imgbuild layer te-as-shipped (kind transformer-engine). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Transformer Engine as shipped in the base image: nothing to build, its checks run in place.
RUN python -c 'import importlib.metadata as m; print("transformer_engine", m.version("transformer_engine"))'

LABEL io.imgbuild.layer="te-as-shipped" \
      io.imgbuild.kind="transformer-engine"