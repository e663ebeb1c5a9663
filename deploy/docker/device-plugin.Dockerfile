# syntax=docker/dockerfile:1
# kvgpu-device-plugin, with vgpuctl and kvgpu-validator (the validator DaemonSet of
# deploy/components/validator runs this image too: it needs vgpuctl beside it). Build from the
# repository root (deploy/build-images.sh does):
#   docker build -f deploy/docker/device-plugin.Dockerfile -t kata-vgpu/device-plugin:TAG .
# The runtime image holds the program and the Debian packages of the libraries it loads
# (deploy/docker/runtime-packages.sh works them out from the built binary), nothing else.

# --- build: the project's own Debian build dependencies, the same as on a developer machine ---
FROM debian:bookworm AS build
COPY scripts/deps/libs.txt /tmp/libs.txt
RUN apt-get update \
 && sed 's/#.*//' /tmp/libs.txt | xargs apt-get install -y --no-install-recommends \
      g++ cmake ninja-build pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVGPU_BUILD_TESTS=OFF \
      -DKVGPU_COMPONENTS="mdev;kube;deviceplugin;validator" \
 && cmake --build /build --target kvgpu-device-plugin vgpuctl kvgpu-validator \
 && strip --strip-unneeded -o /kvgpu-device-plugin /build/deviceplugin/kvgpu-device-plugin \
 && strip --strip-unneeded -o /vgpuctl /build/mdev/vgpuctl \
 && strip --strip-unneeded -o /kvgpu-validator /build/validator/kvgpu-validator \
 && deploy/docker/runtime-packages.sh /kvgpu-device-plugin /vgpuctl /kvgpu-validator \
      >/runtime-packages.txt

# --- runtime ---
FROM debian:bookworm-slim
COPY --from=build /runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
 && xargs apt-get install -y --no-install-recommends </tmp/runtime-packages.txt \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
COPY --from=build /kvgpu-device-plugin /usr/local/bin/kvgpu-device-plugin
COPY --from=build /vgpuctl /usr/local/bin/vgpuctl
COPY --from=build /kvgpu-validator /usr/local/bin/kvgpu-validator
# Root: creating and removing vGPUs writes to sysfs files only root may write
# (the DaemonSet also makes the container privileged; see deploy/base/device-plugin/daemonset.yaml).
USER 0:0
ENTRYPOINT ["/usr/local/bin/kvgpu-device-plugin"]
