// A controller-runtime mutating webhook doing kvgpu-webhook's mutation, the peer of
// bench/peers/webhook.sh: what a platform team writing this webhook with kubebuilder's tools would
// run. sigs.k8s.io/controller-runtime's webhook.Server (TLS, its mux and Prometheus
// instrumentation) serves admission.WithDefaulter for *corev1.Pod: the review is decoded with the
// API machinery's deserializer, the pod with the Kubernetes types, the Defaulter changes the typed
// pod, and controller-runtime marshals it and diffs it against the request's raw pod
// (PatchResponseFromRaw) to get the JSON Patch it answers.
//
// Which pods: runtimeClassName one of kvgpu-webhook's default classes and a container or init
// container asking (limits or requests, quantity not 0) for a tencent.com/vgpu-* resource. A pod
// that asks without a Kata class is denied; the opt-out and marker annotations leave a pod as it
// is. The injected objects (annotations, volumes, init containers and sidecars, the mounts and
// environment of each vGPU container) are not written here: they are read at start from
// kvgpu-webhook's own answer to the benchmark review, as two pods, the review's (-before) and the
// same with kvgpu-webhook's patch applied (-after), both decoded as corev1.Pod. The common case
// only: no renaming of an injected volume whose name the pod already uses, no re-invocation.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/json"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

const (
	resourcePrefix   = "tencent.com/vgpu-"
	optOutAnnotation = "kata-vgpu.io/inject"
	markerAnnotation = "kata-vgpu.io/injected"
)

// kvgpu-webhook's default runtimeClassNames (webhook/config.cpp).
var kataClasses = []string{"kata", "kata-vgpu", "kata-vgpu-vf"}

// vgpuDefaulter holds what is injected, as Kubernetes objects.
type vgpuDefaulter struct {
	annotations  map[string]string
	volumes      []corev1.Volume
	initFront    []corev1.Container // before the pod's own init containers
	initBack     []corev1.Container // after them
	sidecars     []corev1.Container // appended to containers
	mounts       []corev1.VolumeMount
	env          []corev1.EnvVar
	runtimeClass *string // set only when kvgpu-webhook's answer changed it
}

func asksForVgpu(c *corev1.Container) bool {
	for _, list := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for name, quantity := range list {
			if strings.HasPrefix(string(name), resourcePrefix) && !quantity.IsZero() {
				return true
			}
		}
	}
	return false
}

// Default implements admission.Defaulter[*corev1.Pod].
func (d *vgpuDefaulter) Default(_ context.Context, pod *corev1.Pod) error {
	if pod.Annotations[optOutAnnotation] == "false" {
		return nil
	}
	if _, done := pod.Annotations[markerAnnotation]; done {
		return nil
	}
	var vgpu []*corev1.Container
	for i := range pod.Spec.InitContainers {
		if asksForVgpu(&pod.Spec.InitContainers[i]) {
			vgpu = append(vgpu, &pod.Spec.InitContainers[i])
		}
	}
	for i := range pod.Spec.Containers {
		if asksForVgpu(&pod.Spec.Containers[i]) {
			vgpu = append(vgpu, &pod.Spec.Containers[i])
		}
	}
	if len(vgpu) == 0 {
		return nil
	}
	if pod.Spec.RuntimeClassName == nil || !slices.Contains(kataClasses, *pod.Spec.RuntimeClassName) {
		return fmt.Errorf("container %q asks for a vGPU: set runtimeClassName: kata", vgpu[0].Name)
	}

	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	for k, v := range d.annotations {
		pod.Annotations[k] = v
	}
	if d.runtimeClass != nil {
		pod.Spec.RuntimeClassName = d.runtimeClass
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, d.volumes...)
	for _, c := range vgpu {
		for _, m := range d.mounts {
			if !slices.ContainsFunc(c.VolumeMounts, func(o corev1.VolumeMount) bool { return o.MountPath == m.MountPath }) {
				c.VolumeMounts = append(c.VolumeMounts, m)
			}
		}
		for _, e := range d.env {
			if !slices.ContainsFunc(c.Env, func(o corev1.EnvVar) bool { return o.Name == e.Name }) {
				c.Env = append(c.Env, e)
			}
		}
	}
	// The vgpu pointers are not used past this point: the slices below may move.
	if len(d.initFront) > 0 {
		pod.Spec.InitContainers = slices.Concat(d.initFront, pod.Spec.InitContainers)
	}
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, d.initBack...)
	pod.Spec.Containers = append(pod.Spec.Containers, d.sidecars...)
	return nil
}

func readPod(path string) (*corev1.Pod, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(raw, pod); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pod, nil
}

func byName[T any](list []T, name func(*T) string) map[string]bool {
	names := map[string]bool{}
	for i := range list {
		names[name(&list[i])] = true
	}
	return names
}

func containerName(c *corev1.Container) string { return c.Name }

// newDefaulter takes the injected objects from the difference between the pod before and after
// kvgpu-webhook's patch.
func newDefaulter(before, after *corev1.Pod) (*vgpuDefaulter, error) {
	d := &vgpuDefaulter{annotations: map[string]string{}}
	for k, v := range after.Annotations {
		if old, ok := before.Annotations[k]; !ok || old != v {
			d.annotations[k] = v
		}
	}
	if after.Spec.RuntimeClassName != nil &&
		(before.Spec.RuntimeClassName == nil || *before.Spec.RuntimeClassName != *after.Spec.RuntimeClassName) {
		d.runtimeClass = after.Spec.RuntimeClassName
	}
	volumes := byName(before.Spec.Volumes, func(v *corev1.Volume) string { return v.Name })
	for _, v := range after.Spec.Volumes {
		if !volumes[v.Name] {
			d.volumes = append(d.volumes, v)
		}
	}
	inits := byName(before.Spec.InitContainers, containerName)
	seenOwn := false
	for _, c := range after.Spec.InitContainers {
		switch {
		case inits[c.Name]:
			seenOwn = true
		case seenOwn:
			d.initBack = append(d.initBack, c)
		default:
			d.initFront = append(d.initFront, c)
		}
	}
	containers := byName(before.Spec.Containers, containerName)
	for _, c := range after.Spec.Containers {
		if !containers[c.Name] {
			d.sidecars = append(d.sidecars, c)
		}
	}
	// The workload's mounts and environment: what a vGPU container of the template gained.
	var own *corev1.Container
	for i := range before.Spec.Containers {
		if asksForVgpu(&before.Spec.Containers[i]) {
			own = &before.Spec.Containers[i]
			break
		}
	}
	if own == nil {
		return nil, errors.New("the template pod has no container asking for a vGPU")
	}
	for _, c := range after.Spec.Containers {
		if c.Name != own.Name {
			continue
		}
		for _, m := range c.VolumeMounts {
			if !slices.ContainsFunc(own.VolumeMounts, func(o corev1.VolumeMount) bool {
				return o.Name == m.Name && o.MountPath == m.MountPath
			}) {
				d.mounts = append(d.mounts, m)
			}
		}
		for _, e := range c.Env {
			if !slices.ContainsFunc(own.Env, func(o corev1.EnvVar) bool { return o.Name == e.Name }) {
				d.env = append(d.env, e)
			}
		}
	}
	if len(d.volumes) == 0 || len(d.initFront)+len(d.initBack)+len(d.sidecars) == 0 {
		return nil, errors.New("the template shows no injected volume or container: not kvgpu-webhook's mutation?")
	}
	return d, nil
}

func main() {
	host := flag.String("host", "127.0.0.1", "address to listen on")
	port := flag.Int("port", 18446, "port")
	certDir := flag.String("cert-dir", "", "directory with tls.crt and tls.key")
	beforeFile := flag.String("before", "", "the benchmark review's pod (JSON)")
	afterFile := flag.String("after", "", "the same pod with kvgpu-webhook's patch applied (JSON)")
	flag.Parse()

	// As kubebuilder's scaffolded main.go does, production settings (JSON, info level).
	crlog.SetLogger(zap.New(zap.UseDevMode(false)))
	log := crlog.Log.WithName("peer")

	before, err := readPod(*beforeFile)
	if err == nil {
		var after *corev1.Pod
		if after, err = readPod(*afterFile); err == nil {
			var d *vgpuDefaulter
			if d, err = newDefaulter(before, after); err == nil {
				err = serve(*host, *port, *certDir, d)
			}
		}
	}
	if err != nil {
		log.Error(err, "peer webhook failed")
		os.Exit(1)
	}
}

func serve(host string, port int, certDir string, d *vgpuDefaulter) error {
	scheme := k8sruntime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	server := webhook.NewServer(webhook.Options{
		Host:    host,
		Port:    port,
		CertDir: certDir,
		// kubebuilder's scaffold turns HTTP/2 off by default (its enableHTTP2 flag); wrk and the
		// API server speak HTTP/1.1 to it then.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	})
	server.Register("/mutate", admission.WithDefaulter[*corev1.Pod](scheme, d))
	crlog.Log.WithName("peer").Info("serving", "GOMAXPROCS", runtime.GOMAXPROCS(0),
		"volumes", len(d.volumes), "initContainers", len(d.initFront)+len(d.initBack),
		"sidecars", len(d.sidecars), "mounts", len(d.mounts), "env", len(d.env))
	return server.Start(signals.SetupSignalHandler())
}
