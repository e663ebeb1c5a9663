# syntax=docker/dockerfile:1
# kvgpu-scheduler-extender. Build from the repository root (deploy/build-images.sh does):
#   docker build -f deploy/docker/scheduler-extender.Dockerfile -t kata-vgpu/scheduler-extender:TAG .
# The runtime image holds the program and the Debian packages of the libraries it loads
# (deploy/docker/runtime-packages.sh works them out from the built binary), nothing else.

# --- build ---
FROM debian:bookworm AS build
COPY scripts/deps/libs.txt /tmp/libs.txt
RUN apt-get update \
 && sed 's/#.*//' /tmp/libs.txt | xargs apt-get install -y --no-install-recommends \
      g++ cmake ninja-build pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVGPU_BUILD_TESTS=OFF \
      -DKVGPU_COMPONENTS="kube;extender" \
 && cmake --build /build --target kvgpu-scheduler-extender \
 && strip --strip-unneeded -o /kvgpu-scheduler-extender /build/extender/kvgpu-scheduler-extender \
 && deploy/docker/runtime-packages.sh /kvgpu-scheduler-extender >/runtime-packages.txt

# --- runtime ---
FROM debian:bookworm-slim
COPY --from=build /runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
 && xargs apt-get install -y --no-install-recommends </tmp/runtime-packages.txt \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
COPY --from=build /kvgpu-scheduler-extender /usr/local/bin/kvgpu-scheduler-extender
# An unprivileged user that owns nothing in the image (the Deployment also sets runAsNonRoot and
# a read-only root filesystem). 8888 needs no capability.
USER 65532:65532
EXPOSE 8888
ENTRYPOINT ["/usr/local/bin/kvgpu-scheduler-extender"]
