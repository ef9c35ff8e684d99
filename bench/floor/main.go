// The floor for bench/webhook.py: the cheapest admission webhook there can be. Go's net/http over TLS
// (HTTP/2 when the API server offers it), reading only the review's uid and allowing everything, so what it
// adds to a create is the API server's own cost of calling a webhook. Dry runs are refused, with a fixed
// message, so the benchmark can tell when the API server has started calling it.
//
//	go run ./bench/floor 127.0.0.1:9443 /path/to/tls   (tls.crt and tls.key in that directory)
package main

import (
	"encoding/json"
	"log"
	"net/http"
	"os"
	"path/filepath"
)

const DryRunRefusal = "the floor webhook refuses dry runs"

type review struct {
	Request struct {
		UID    string `json:"uid"`
		DryRun bool   `json:"dryRun"`
	} `json:"request"`
}

func admit(w http.ResponseWriter, r *http.Request) {
	var in review
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	response := map[string]any{"uid": in.Request.UID, "allowed": !in.Request.DryRun}
	if in.Request.DryRun {
		response["status"] = map[string]any{"code": 403, "message": DryRunRefusal}
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response,
	}); err != nil {
		log.Print(err)
	}
}

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: floor HOST:PORT TLS_DIR")
	}
	dir := os.Args[2]
	http.HandleFunc("/", admit)
	log.Fatal(http.ListenAndServeTLS(os.Args[1], filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), nil))
}
