"""A kubelet, as far as device plugins can see one, written from upstream's definitions alone.

This is a peer the plugin's authors did not write alongside the plugin: it is Python on the
upstream gRPC library, speaks the wire contract of the kubelet protos (device plugin v1beta1,
PodResources v1) and follows the order and timing of kubelet's device manager
(pkg/kubelet/cm/devicemanager in kubernetes/kubernetes):

- Registration on <dir>/device-plugins/kubelet.sock; for each registered resource kubelet dials
  the plugin's socket, asks GetDevicePluginOptions and keeps a ListAndWatch stream open. The
  latest list is the truth: healthy devices not in kubelet's in-use set are available. That set
  (allocatedDevices) is kept apart from the recorded allocations: a choice enters it before the
  Allocate call, and it is rebuilt from the recorded allocations when UpdateAllocatedDevices
  forgets a pod or an Allocate fails, so a PodResources List during an allocation can drop the
  in-flight devices and kubelet hand them to the next pod (kubernetes/kubernetes#137534, open
  as of 1.37). (The first version of this peer
  derived the set from the recorded allocations and could not show that.)
- Admission is per container, init containers first, in pod order. Devices given to an init
  container are reusable by the containers after it (`devicesToReuse`); an app container takes
  reusable devices first. For every container that gets devices kubelet calls Allocate (also for
  reused ones), after GetPreferredAllocation when the plugin offers it (kubelet keeps only the
  answer's IDs that are available), and records the answer at once: PodResources and the
  checkpoint show it from then on. (The real kubelet writes its checkpoint outside its lock, so
  a concurrent write with older books can land after this one and the file lack the pod until the
  next write; this peer writes in order.)
- Before each admission, and on each PodResources List, kubelet forgets the devices of pods that
  are no longer active (`UpdateAllocatedDevices`); a deleted pod's entries stay in the checkpoint
  until its next write. List shows a pod's app containers (and native sidecars) only: a plain init
  container's devices are in the checkpoint alone.
- A restart removes everything in device-plugins/ but the checkpoint, re-reads the checkpoint,
  and serves kubelet.sock and PodResources again; PodResources lists no pod until the pod
  manager has synced the node's pods again (a delay the caller chooses).

Failure modes a real kubelet shows are switches: PodResources down, hung, slow or empty.
"""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import json
import os
import pathlib
import sys
import threading
import time
import uuid
from typing import Callable

import grpc

# The kubelet API's messages (proto/kubelet/messages.py).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "proto" / "kubelet"))
import messages  # noqa: E402

CHECKPOINT_NAME = "kubelet_internal_checkpoint"
API_VERSION = "v1beta1"
NO_TOPOLOGY = "-1"  # the NUMA key kubelet writes when a device has no topology


class AdmissionError(Exception):
    """What kubelet turns into UnexpectedAdmissionError on the pod."""


@dataclasses.dataclass
class Container:
    name: str
    resources: dict[str, int]
    init: bool = False
    sidecar: bool = False  # an init container with restartPolicy Always


@dataclasses.dataclass
class Pod:
    name: str
    containers: list[Container]
    namespace: str = "default"
    uid: str = dataclasses.field(default_factory=lambda: str(uuid.uuid4()))


@dataclasses.dataclass
class Allocation:
    device_ids: list[str]
    response: object  # ContainerAllocateResponse
    answered: float = 0.0  # time.monotonic() when the Allocate's answer came back


class Endpoint:
    """kubelet's side of one registered resource: its options and its ListAndWatch stream."""

    def __init__(self, kubelet: "Kubelet", resource: str, socket: pathlib.Path, options):
        self.kubelet = kubelet
        self.resource = resource
        self.socket = socket
        self.options = options
        self.devices: dict[str, str] = {}  # ID -> health ("Healthy"/"Unhealthy")
        self.updates = 0
        self.connected = False
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self._stream = None
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _call(self, method: str, request, response_type, timeout: float):
        fn = self.channel.unary_unary(
            f"/{API_VERSION}.DevicePlugin/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        return fn(request, timeout=timeout)

    def _watch(self):
        dp = self.kubelet.dp
        fn = self.channel.unary_stream(
            f"/{API_VERSION}.DevicePlugin/ListAndWatch",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=dp.ListAndWatchResponse.FromString,
        )
        try:
            self._stream = fn(dp.Empty())
            self.connected = True
            for response in self._stream:
                read = time.monotonic()  # when kubelet holds it: what admissions act on
                with self.kubelet.lock:
                    self.devices = {d.ID: d.health for d in response.devices}
                    self.updates += 1
                    if self.kubelet.watch_log is not None:
                        self.kubelet.watch_log.append((read, self.resource, dict(self.devices)))
                    self.kubelet.changed.notify_all()
        except grpc.RpcError:
            pass
        finally:
            with self.kubelet.lock:
                self.connected = False
                self.kubelet.changed.notify_all()

    def close(self):
        if self._stream is not None:
            self._stream.cancel()
        self.channel.close()

    def preferred(self, available: list[str], must_include: list[str], size: int) -> list[str]:
        dp = self.kubelet.dp
        request = dp.PreferredAllocationRequest()
        container = request.container_requests.add()
        container.available_deviceIDs.extend(available)
        container.must_include_deviceIDs.extend(must_include)
        container.allocation_size = size
        answer = self._call(
            "GetPreferredAllocation", request, dp.PreferredAllocationResponse, timeout=10
        )
        return list(answer.container_responses[0].deviceIDs)

    def allocate(self, ids: list[str]):
        dp = self.kubelet.dp
        request = dp.AllocateRequest()
        request.container_requests.add().devices_ids.extend(ids)
        return self._call("Allocate", request, dp.AllocateResponse, timeout=30)


class Kubelet:
    def __init__(self, root: pathlib.Path):
        self.root = root
        self.dp, self.pr = messages.load("deviceplugin_v1beta1"), messages.load("podresources_v1")
        self.plugin_dir = root / "device-plugins"
        self.pod_resources_dir = root / "pod-resources"
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.endpoints: dict[str, Endpoint] = {}
        self.registrations: list[str] = []
        # podDevices: pod UID -> container -> resource -> Allocation
        self.pod_devices: dict[str, dict[str, dict[str, Allocation]]] = {}
        # kubelet's allocatedDevices: the IDs it will not hand out, per resource. Apart from
        # pod_devices: a choice enters it before the Allocate call, and it is rebuilt from
        # pod_devices only when UpdateAllocatedDevices forgets a pod or an Allocate fails.
        self.allocated: dict[str, set[str]] = {}
        # Called with (pod, resource, ids) just before each Allocate call, for tests that act
        # while an allocation is in flight.
        self.on_allocate: Callable[[Pod, str, list[str]], None] | None = None
        self.active: dict[str, Pod] = {}  # pods the pod manager knows (what PodResources lists)
        self.bound: dict[str, Pod] = {}  # every pod the API server bound to this node
        self.deleted: set[str] = set()  # pods deleted at the API server
        self._generation = 0
        self.synced = True  # false after a restart until the pod manager synced again
        # PodResources behaviour: "normal", "down" (UNAVAILABLE), "hang", "empty", or a float
        # number of seconds each call takes.
        self.pod_resources_mode: object = "normal"
        self.pod_resources_calls = 0
        # Device IDs to take first when free, per resource: kubelet may give any free ID, and a
        # test that needs a particular one handed on says so here.
        self.prefer: dict[str, list[str]] = {}
        self._servers: list[grpc.Server] = []
        # The API server the pods come from (apiserver_peer.ApiServer), when there is one.
        self.api = None
        # Every ListAndWatch update as kubelet read it, (monotonic time, resource, {ID: health}),
        # while a test keeps a list here.
        self.watch_log: list | None = None
        # Called with the resource as soon as an Allocate of an admission is answered, before
        # kubelet records it: a test looks at the plugin then.
        self.on_answer: Callable[[str], None] | None = None

    # --- serving ---------------------------------------------------------------------------

    def start(self, wipe: bool = True):
        """Starts as kubelet does: device-plugins/ emptied but for the checkpoint, checkpoint
        re-read, kubelet.sock and PodResources served. `wipe=False`: the plugins' sockets are
        left in place (a kubelet replaced by one that did not clean up; only kubelet.sock is
        new)."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.pod_resources_dir.mkdir(parents=True, exist_ok=True)
        for entry in self.plugin_dir.iterdir():
            if entry.name == CHECKPOINT_NAME:
                continue
            if wipe or entry.name == "kubelet.sock":
                entry.unlink()
        self._read_checkpoint()
        registration = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        registration.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    f"{API_VERSION}.Registration",
                    {
                        "Register": grpc.unary_unary_rpc_method_handler(
                            self._register,
                            request_deserializer=self.dp.RegisterRequest.FromString,
                            response_serializer=lambda m: m.SerializeToString(),
                        )
                    },
                ),
            )
        )
        registration.add_insecure_port(f"unix://{self.plugin_dir / 'kubelet.sock'}")
        pod_resources = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=8))
        handlers = {
            "List": grpc.unary_unary_rpc_method_handler(
                self._list,
                request_deserializer=self.pr.ListPodResourcesRequest.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            ),
            "Get": grpc.unary_unary_rpc_method_handler(
                self._get,
                request_deserializer=self.pr.GetPodResourcesRequest.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            ),
        }
        pod_resources.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1.PodResourcesLister", handlers),)
        )
        pr_socket = self.pod_resources_dir / "kubelet.sock"
        if pr_socket.exists():
            pr_socket.unlink()
        pod_resources.add_insecure_port(f"unix://{pr_socket}")
        pod_resources.start()
        registration.start()
        self._servers = [registration, pod_resources]

    def stop(self):
        for server in self._servers:
            server.stop(grace=0)
        self._servers = []
        with self.lock:
            endpoints = list(self.endpoints.values())
            self.endpoints.clear()
        for endpoint in endpoints:
            endpoint.close()

    def restart(self, sync_after: float, wipe: bool = True):
        """kubelet restarted: the pod manager knows no pod for `sync_after` seconds, then every
        pod the API server has bound to the node and not deleted. `wipe`: as start()."""
        self.stop()
        with self.lock:
            self.active = {}
            self.synced = False
            self._generation += 1
            generation = self._generation
        self.start(wipe=wipe)

        def sync():
            time.sleep(sync_after)
            with self.lock:
                if generation != self._generation:
                    return  # a later restart owns the sync
                self.active = {u: p for u, p in self.bound.items() if u not in self.deleted}
                self.synced = True

        threading.Thread(target=sync, daemon=True).start()

    def _register(self, request, context):
        if request.version != API_VERSION:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unsupported version")
        socket = self.plugin_dir / request.endpoint
        endpoint = Endpoint(self, request.resource_name, socket, request.options)
        with self.lock:
            old = self.endpoints.get(request.resource_name)
            self.endpoints[request.resource_name] = endpoint
            self.registrations.append(request.resource_name)
            self.changed.notify_all()
        if old is not None:
            old.close()
        return self.dp.Empty()

    def _pod_resources_gate(self, context) -> bool:
        """Applies the PodResources failure mode; True when the call should answer empty."""
        with self.lock:
            self.pod_resources_calls += 1
            mode = self.pod_resources_mode
        if mode == "down":
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet is not serving PodResources")
        if mode == "hang":
            while True:
                with self.lock:
                    if self.pod_resources_mode != "hang":
                        break
                if not context.is_active():
                    return True
                time.sleep(0.05)
        if isinstance(mode, (int, float)):
            time.sleep(mode)
        return mode == "empty"

    def _list(self, request, context):
        empty = self._pod_resources_gate(context)
        response = self.pr.ListPodResourcesResponse()
        if empty:
            return response
        with self.lock:
            # List first lets the device manager forget inactive pods, as kubelet's does.
            self._update_allocated_devices()
            for pod in self.active.values():
                self._fill_pod(response.pod_resources.add(), pod)
        return response

    def _get(self, request, context):
        self._pod_resources_gate(context)
        with self.lock:
            for pod in self.active.values():
                if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                    response = self.pr.GetPodResourcesResponse()
                    self._fill_pod(response.pod_resources, pod)
                    return response
        context.abort(grpc.StatusCode.NOT_FOUND, "pod not found")

    def _fill_pod(self, out, pod: Pod):
        """As kubelet's List: the pod's app containers (spec.containers) and, since native
        sidecars, its restartable init containers; never the plain init containers, whose
        devices only the checkpoint shows."""
        out.name = pod.name
        out.namespace = pod.namespace
        for container in pod.containers:
            if container.init and not container.sidecar:
                continue
            c = out.containers.add()
            c.name = container.name
            for resource, allocation in self.pod_devices.get(pod.uid, {}).get(container.name, {}).items():
                devices = c.devices.add()
                devices.resource_name = resource
                devices.device_ids.extend(allocation.device_ids)

    # --- the device manager ----------------------------------------------------------------

    def _update_allocated_devices(self):
        """Forgets the devices of pods that are no longer active (kubelet's
        UpdateAllocatedDevices, run before every admission and every List). Not before the pod
        sources are ready after a restart (sourcesReady): every pod would look inactive then.
        When it forgot a pod it rebuilds the in-use set from the recorded allocations, as kubelet
        does: the devices of an allocation still in flight drop out of it, and the next pod can
        be handed them (a List during an Allocate, with an ended pod still in the books)."""
        if not self.synced:
            return
        gone = [uid for uid in self.pod_devices if uid not in self.active]
        for uid in gone:
            del self.pod_devices[uid]
        if gone:
            self._rebuild_allocated()

    def _rebuild_allocated(self):
        self.allocated = {}
        for containers in self.pod_devices.values():
            for resources in containers.values():
                for resource, allocation in resources.items():
                    self.allocated.setdefault(resource, set()).update(allocation.device_ids)

    def _in_use(self, resource: str) -> set[str]:
        return set(self.allocated.get(resource, set()))

    def admit(self, pod: Pod) -> dict[str, dict[str, Allocation]]:
        """Admits one pod as the device manager does, container by container. Raises
        AdmissionError with kubelet's reason; a failed pod keeps what earlier containers got,
        as in kubelet, until it is deleted."""
        with self.lock:
            if not self.synced:
                raise AdmissionError("kubelet has not synced its pods yet")
            self.bound[pod.uid] = pod
        if self.api is not None:
            self.api.bind(
                pod.uid, pod.namespace, pod.name,
                [(c.name, c.init, c.resources) for c in pod.containers],
            )
        with self.lock:
            self.active[pod.uid] = pod
            self._update_allocated_devices()
        reuse: dict[str, set[str]] = {}
        for container in [c for c in pod.containers if c.init] + [
            c for c in pod.containers if not c.init
        ]:
            for resource, count in container.resources.items():
                ids = self._devices_to_allocate(pod, container, resource, count, reuse)
                with self.lock:
                    endpoint = self.endpoints.get(resource)
                if endpoint is None:
                    raise AdmissionError(f"{resource}: no device plugin registered")
                if self.on_allocate is not None:
                    self.on_allocate(pod, resource, ids)
                try:
                    response = endpoint.allocate(ids)
                    answered = time.monotonic()
                    if self.on_answer is not None:
                        self.on_answer(resource)
                except grpc.RpcError as e:
                    with self.lock:
                        self._rebuild_allocated()  # kubelet's answer to a failed Allocate
                    raise AdmissionError(
                        f"Allocate of {resource} {ids} failed: {e.code().name}: {e.details()}"
                    ) from None
                if len(response.container_responses) != 1:
                    raise AdmissionError("Allocate answered the wrong number of containers")
                with self.lock:
                    self.pod_devices.setdefault(pod.uid, {}).setdefault(container.name, {})[
                        resource
                    ] = Allocation(ids, response.container_responses[0], answered)
                    self._write_checkpoint()
                if container.init:
                    reuse.setdefault(resource, set()).update(ids)
                else:
                    reuse.get(resource, set()).difference_update(ids)
        with self.lock:
            return self.pod_devices.get(pod.uid, {})

    def _devices_to_allocate(self, pod, container, resource, count, reuse) -> list[str]:
        with self.lock:
            endpoint = self.endpoints.get(resource)
            if endpoint is None or not endpoint.connected:
                raise AdmissionError(f"{resource}: no device plugin registered")
            healthy = {i for i, h in endpoint.devices.items() if h == "Healthy"}
            if not healthy:
                raise AdmissionError(
                    "no healthy devices present; cannot allocate unhealthy devices " + resource
                )
            reusable = sorted(reuse.get(resource, set()))
            if len(reusable) >= count:
                return reusable[:count]
            chosen = list(reusable)
            available = sorted(healthy - self._in_use(resource) - set(chosen))
            need = count - len(chosen)
            if len(available) < need:
                raise AdmissionError(
                    f"requested number of devices unavailable for {resource}. "
                    f"Requested: {count}, Available: {len(available)}"
                )
            options = endpoint.options
            for i in self.prefer.get(resource, []):
                if i in available and i not in chosen and len(chosen) < count:
                    chosen.append(i)
        if len(chosen) < count and options.get_preferred_allocation_available:
            try:
                preferred = endpoint.preferred(sorted(set(available) | set(chosen)), chosen, count)
            except grpc.RpcError as e:
                raise AdmissionError(
                    f"GetPreferredAllocation of {resource} failed: {e.details()}"
                ) from None
            for i in preferred:
                if i in available and i not in chosen and len(chosen) < count:
                    chosen.append(i)
        for i in available:
            if len(chosen) >= count:
                break
            if i not in chosen:
                chosen.append(i)
        with self.lock:
            self.allocated.setdefault(resource, set()).update(chosen)
        return chosen

    def delete(self, pod: Pod):
        """The pod is gone from the pod manager: PodResources stops listing it at once; its
        devices are freed at the next admission."""
        with self.lock:
            self.active.pop(pod.uid, None)
            self.deleted.add(pod.uid)
        if self.api is not None:
            self.api.delete(pod.uid)

    # --- the checkpoint --------------------------------------------------------------------

    def _write_checkpoint(self):
        entries = []
        for uid, containers in self.pod_devices.items():
            for name, resources in containers.items():
                for resource, allocation in resources.items():
                    entries.append(
                        {
                            "PodUID": uid,
                            "ContainerName": name,
                            "ResourceName": resource,
                            "DeviceIDs": {NO_TOPOLOGY: allocation.device_ids},
                            "AllocResp": base64.b64encode(allocation.response.SerializeToString())
                            .decode(),
                        }
                    )
        registered = {
            r: sorted(e.devices) for r, e in self.endpoints.items() if e.devices
        }
        data = {"PodDeviceEntries": entries, "RegisteredDevices": registered}
        # kubelet's checksum hashes its Go structs (FNV-32a over a spew dump), which has no
        # equivalent outside Go; the plugin does not check it, so any number stands in.
        document = {"Data": data, "Checksum": 0}
        path = self.plugin_dir / CHECKPOINT_NAME
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(document))
        os.replace(tmp, path)

    def _read_checkpoint(self):
        path = self.plugin_dir / CHECKPOINT_NAME
        if not path.exists():
            return
        data = json.loads(path.read_text())["Data"]
        devices: dict = {}
        for entry in data["PodDeviceEntries"]:
            ids = [i for group in entry["DeviceIDs"].values() for i in group]
            response = self.dp.ContainerAllocateResponse.FromString(
                base64.b64decode(entry["AllocResp"])
            )
            devices.setdefault(entry["PodUID"], {}).setdefault(entry["ContainerName"], {})[
                entry["ResourceName"]
            ] = Allocation(ids, response)
        with self.lock:
            self.pod_devices = devices
            self._rebuild_allocated()

    # --- waiting ---------------------------------------------------------------------------

    def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.lock:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 0.05))
            return True

    def listed(self, resource: str) -> dict[str, str]:
        with self.lock:
            endpoint = self.endpoints.get(resource)
            return dict(endpoint.devices) if endpoint else {}

    def resources(self) -> list[str]:
        with self.lock:
            return sorted(r for r, e in self.endpoints.items() if e.connected)
