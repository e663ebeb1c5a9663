// The peer a platform team would otherwise run: a Go net/http + encoding/json mutating webhook
// doing the same work per review as kvgpu-webhook (decode the whole AdmissionReview, decide
// from runtimeClassName and the containers' vGPU limits, build the JSON Patch, encode it,
// base64 it, answer), for bench/webhook/run.sh. Standard library only.
//
// The injected objects come from -template: the JSON Patch kvgpu-webhook answered for the
// benchmark's review. Pod-level operations are taken as they are; operations on
// /spec/containers/<i>/... are repeated for every container that asks for a vGPU, with its index.
package main

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
)

type op struct {
	Op    string      `json:"op"`
	Path  string      `json:"path"`
	Value interface{} `json:"value,omitempty"`
}

type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    struct {
		UID    string                 `json:"uid"`
		Object map[string]interface{} `json:"object"`
	} `json:"request"`
}

var containerPath = regexp.MustCompile(`^/spec/containers/\d+(/.*)$`)

func main() {
	listen := flag.String("listen", "127.0.0.1:18445", "address")
	cert := flag.String("cert", "", "TLS certificate")
	key := flag.String("key", "", "TLS key")
	templateFile := flag.String("template", "", "kvgpu-webhook's JSON Patch for the review")
	flag.Parse()

	raw, err := os.ReadFile(*templateFile)
	if err != nil {
		log.Fatal(err)
	}
	var template []op
	if err := json.Unmarshal(raw, &template); err != nil {
		log.Fatal(err)
	}
	var podOps, containerOps []op
	for _, o := range template {
		if m := containerPath.FindStringSubmatch(o.Path); m != nil {
			containerOps = append(containerOps, op{o.Op, m[1], o.Value})
		} else {
			podOps = append(podOps, o)
		}
	}

	http.HandleFunc("/mutate", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		var in review
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 19<<20)).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		spec, _ := in.Request.Object["spec"].(map[string]interface{})
		runtime, _ := spec["runtimeClassName"].(string)
		var patch []op
		if strings.HasPrefix(runtime, "kata") {
			containers, _ := spec["containers"].([]interface{})
			for i, c := range containers {
				container, _ := c.(map[string]interface{})
				resources, _ := container["resources"].(map[string]interface{})
				limits, _ := resources["limits"].(map[string]interface{})
				for name := range limits {
					if strings.HasPrefix(name, "tencent.com/vgpu-") {
						if patch == nil {
							patch = append(patch, podOps...)
						}
						for _, o := range containerOps {
							patch = append(patch, op{o.Op, "/spec/containers/" + strconv.Itoa(i) + o.Path, o.Value})
						}
						break
					}
				}
			}
		}
		response := map[string]interface{}{"uid": in.Request.UID, "allowed": true}
		if patch != nil {
			encoded, err := json.Marshal(patch)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			response["patchType"] = "JSONPatch"
			response["patch"] = base64.StdEncoding.EncodeToString(encoded)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]interface{}{
			"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
	})
	log.Fatal(http.ListenAndServeTLS(*listen, *cert, *key, nil))
}
