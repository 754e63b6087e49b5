# imgbuild layer cv2-leftovers (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Removes what the parent ships; the reason is in stacks.yaml and in `imgbuild plan --explain`.
RUN rm -rf -- /usr/local/lib/python3.10/dist-packages/cv2

LABEL io.imgbuild.layer="cv2-leftovers" \
      io.imgbuild.kind="system-setup"