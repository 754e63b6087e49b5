# imgbuild layer megatron-path (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV PYTHONPATH="/mount/megablocks/third_party/Megatron-LM${PYTHONPATH:+:${PYTHONPATH}}"
WORKDIR /mount/megablocks

LABEL io.imgbuild.layer="megatron-path" \
      io.imgbuild.kind="system-setup"