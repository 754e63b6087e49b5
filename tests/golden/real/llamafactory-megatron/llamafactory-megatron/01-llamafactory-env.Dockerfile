# imgbuild layer llamafactory-env (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV APT_MIRROR="https://mirrors.tuna.tsinghua.edu.cn/ubuntu/" \
    DEBIAN_FRONTEND="noninteractive" \
    PIP_ROOT_USER_ACTION="ignore" \
    PYPI_MIRROR="https://mirrors.aliyun.com/pypi/simple/" \
    PYPI_TRUSTED_HOST="mirrors.aliyun.com"

LABEL io.imgbuild.layer="llamafactory-env" \
      io.imgbuild.kind="system-setup"