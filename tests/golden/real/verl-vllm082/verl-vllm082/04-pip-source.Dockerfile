# imgbuild layer pip-source (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN python3 -m pip config set global.index-url https://mirrors.tuna.tsinghua.edu.cn/pypi/web/simple \
 && python3 -m pip config set global.extra-index-url https://mirrors.tuna.tsinghua.edu.cn/pypi/web/simple

LABEL io.imgbuild.layer="pip-source" \
      io.imgbuild.kind="system-setup"