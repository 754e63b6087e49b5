# imgbuild layer aligner-workdir (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# One time for every file this layer writes (docs/reproducible.md): pip compiles checked-hash .pyc, and an
# engine that can fix file times (Buildah --timestamp) stamps the layer with it. From site.source_date_epoch.
ARG SOURCE_DATE_EPOCH=315532800

WORKDIR /opt

LABEL io.imgbuild.layer="aligner-workdir" \
      io.imgbuild.kind="system-setup"