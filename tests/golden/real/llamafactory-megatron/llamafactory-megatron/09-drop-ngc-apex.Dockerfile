# imgbuild layer drop-ngc-apex (kind pip). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Removes packages the parent ships; the reason is in stacks.yaml and in `imgbuild plan --explain`.
RUN python -m pip uninstall -y apex

LABEL io.imgbuild.layer="drop-ngc-apex" \
      io.imgbuild.kind="pip"