# imgbuild layer opencv-uninstall (kind pip). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Removes packages the parent ships; the reason is in stacks.yaml and in `imgbuild plan --explain`.
RUN python -m pip uninstall -y opencv opencv-python opencv-python-headless

LABEL io.imgbuild.layer="opencv-uninstall" \
      io.imgbuild.kind="pip"