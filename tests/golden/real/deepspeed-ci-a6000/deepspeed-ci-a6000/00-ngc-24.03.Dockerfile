# imgbuild layer ngc-24.03 (kind ngc-pytorch). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# One time for every file this layer writes (docs/reproducible.md): pip compiles checked-hash .pyc, and an
# engine that can fix file times (Buildah --timestamp) stamps the layer with it. From site.source_date_epoch.
# One hash seed for every Python the build runs: a set a setup.py iterates (DeepSpeed's extras) is then
# written in one order. Both are build arguments: in the key, never in the image's environment.
ARG SOURCE_DATE_EPOCH=315532800
ARG PYTHONHASHSEED=0

RUN mkdir -p /etc/imgbuild \
 && python -c 'import importlib.metadata as m; print("torch==" + m.version("torch"))' > /etc/imgbuild/constraints.txt \
 && if [ -f /etc/pip/constraint.txt ]; then grep -iv '^torch==' /etc/pip/constraint.txt >> /etc/imgbuild/constraints.txt; fi \
 && cat /etc/imgbuild/constraints.txt
ENV PIP_CONSTRAINT=/etc/imgbuild/constraints.txt

# What records when, or in what order, this build ran leaves the layer: installer logs and the caches
# that hold times or inode numbers. Nothing a program reads at run time.
RUN rm -rf /var/log/apt/*.log /var/log/apt/eipp.log.xz /var/log/dpkg.log /var/log/alternatives.log \
        /var/cache/apt/*.bin /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old /var/lib/dpkg/*-old

LABEL io.imgbuild.layer="ngc-24.03" \
      io.imgbuild.kind="ngc-pytorch"