# imgbuild layer ngc-jax-site (kind ngc-jax). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -- ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN mkdir -p /etc/imgbuild \
 && python -c 'import importlib.metadata as m; print("\n".join(d + "==" + m.version(d) for d in ["jax", "jaxlib"]))' > /etc/imgbuild/constraints.txt \
 && cat /etc/imgbuild/constraints.txt
ENV PIP_CONSTRAINT=/etc/imgbuild/constraints.txt

LABEL io.imgbuild.layer="ngc-jax-site" \
      io.imgbuild.kind="ngc-jax"