# imgbuild layer ngc-23.03 (kind ngc-pytorch). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -- libaio-dev \
 && rm -rf /var/lib/apt/lists/*
RUN mkdir -p /etc/imgbuild \
 && python -c 'import importlib.metadata as m; print("torch==" + m.version("torch"))' > /etc/imgbuild/constraints.txt \
 && if [ -f /etc/pip/constraint.txt ]; then grep -iv '^torch==' /etc/pip/constraint.txt >> /etc/imgbuild/constraints.txt; fi \
 && cat /etc/imgbuild/constraints.txt
ENV PIP_CONSTRAINT=/etc/imgbuild/constraints.txt

LABEL io.imgbuild.layer="ngc-23.03" \
      io.imgbuild.kind="ngc-pytorch"