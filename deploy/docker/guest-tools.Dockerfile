# syntax=docker/dockerfile:1
# kata-vgpu/guest-tools: the image of the containers the webhook injects into vGPU pods (the
# driver loader and the nvidia-gridd sidecar). They run inside the pod's Kata VM; the NVIDIA
# driver, its tools and libraries come from the driver bundle the webhook mounts at
# /usr/local/nvidia (guest-image/build.sh), not from this image. What the injected commands call
# besides the bundle: /bin/sh, grep, pidof, sleep (all in bookworm-slim) and modprobe (kmod).
#   docker build -f deploy/docker/guest-tools.Dockerfile -t kata-vgpu/guest-tools:TAG .
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends kmod \
 && rm -rf /var/lib/apt/lists/*
# Root: loading a kernel module needs it (the containers are privileged inside the guest VM
# only; the host sees a VM, not a privileged container).
USER 0:0
