# imgbuild layer ngc-25.03-mcore-dev (kind ngc-pytorch). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN mkdir -p /etc/imgbuild \
 && python -c 'import importlib.metadata as m; print("torch==" + m.version("torch"))' > /etc/imgbuild/constraints.txt \
 && cat /etc/imgbuild/constraints.txt
ENV PIP_CONSTRAINT=/etc/imgbuild/constraints.txt

LABEL io.imgbuild.layer="ngc-25.03-mcore-dev" \
      io.imgbuild.kind="ngc-pytorch"