// The go-control-plane server of bench/xds.py: it serves the resources tollgate's translator builds for the
// bench workload from go-control-plane's own caches, so that the two servers are compared on the same Envoys,
// the same resources and the same changes.
//
//   - sotw: one SnapshotCache (ADS) holding a snapshot per Envoy; each resource type carries its own version
//     (the number of the change that last touched it), so a change re-sends only the types it touches.
//   - delta: go-control-plane's documented delta setup, a LinearCache per resource type behind a MuxCache.
//     Clusters and load assignments are the same for every Envoy (one LinearCache each); listeners are bound
//     to each Envoy's own address, so each Envoy has its own listener LinearCache, chosen by node id.
//
// A small HTTP control API (JSON) feeds it and reads it:
//
//	PUT  /resources  {"nodes": {id: address}, "listeners": [b64], "clusters": [b64], "endpoints": [b64]}: the
//	                 whole set (change 1); listeners are serialised on address 0.0.0.0 and bound to each
//	                 node's address here, as tollgate binds them to the address in the Envoy's node metadata
//	POST /change     {"listeners": [...], "clusters": [...], "endpoints": [...]}: resources added or replaced;
//	                 answers {"change": N}
//	GET  /converged?change=N&timeout=S: waits until every Envoy has ACKed change N (every type it touched);
//	                 answers {"seconds": time from the change to the last ACK}
//	GET  /stats      {"cpu_seconds": user+system (getrusage), "rss_mib": resident memory now}
//
// Resources are base64 of the serialised message (Listener, Cluster, ClusterLoadAssignment).
//
//	gcp -mode delta -xds 127.0.0.1:18000 -control 127.0.0.1:18001
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"
)

var typeOrder = []string{resource.ClusterType, resource.EndpointType, resource.ListenerType}

// key is one Envoy's view of one resource type.
type key struct{ node, typeURL string }

// change is one update still waited for: the version of each (Envoy, type) that must be ACKed.
type change struct {
	started   time.Time
	remaining map[key]uint64
	seconds   float64
	done      chan struct{}
}

// payload is what PUT /resources and POST /change carry.
type payload struct {
	Nodes     map[string]string `json:"nodes"`
	Listeners []string          `json:"listeners"`
	Clusters  []string          `json:"clusters"`
	Endpoints []string          `json:"endpoints"`
}

type state struct {
	mode string
	mu   sync.Mutex

	nodes     map[string]string // node id -> listener address
	listeners map[string]map[string]types.Resource
	clusters  map[string]types.Resource
	endpoints map[string]types.Resource
	versions  map[key]uint64 // the version each (Envoy, type) is at

	snapshots cache.SnapshotCache
	linear    map[string]*cache.LinearCache // "clusters", "endpoints" and one "listeners/<node>" per Envoy
	mux       *cache.MuxCache

	changes []*change
	byID    map[int]*change
	acked   map[key]uint64
	nonces  map[int64]map[string]uint64 // delta: version of each response in flight, by stream and nonce
	streams map[int64]string            // delta: node id of each stream
}

func newState(mode string) *state {
	s := &state{
		mode:    mode,
		byID:    map[int]*change{},
		acked:   map[key]uint64{},
		nonces:  map[int64]map[string]uint64{},
		streams: map[int64]string{},
	}
	if mode == "sotw" {
		s.snapshots = cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	} else {
		s.linear = map[string]*cache.LinearCache{}
		s.mux = &cache.MuxCache{
			Classify:      func(r *cache.Request) string { return classify(r.GetTypeUrl(), r.GetNode().GetId()) },
			ClassifyDelta: func(r *cache.DeltaRequest) string { return classify(r.GetTypeUrl(), r.GetNode().GetId()) },
			Caches:        map[string]cache.Cache{},
		}
	}
	return s
}

func classify(typeURL, node string) string {
	switch typeURL {
	case resource.ClusterType:
		return "clusters"
	case resource.EndpointType:
		return "endpoints"
	case resource.ListenerType:
		return "listeners/" + node
	}
	return typeURL
}

func decode[T proto.Message](items []string, fresh func() T) (map[string]T, error) {
	out := make(map[string]T, len(items))
	for _, item := range items {
		raw, err := base64.StdEncoding.DecodeString(item)
		if err != nil {
			return nil, err
		}
		message := fresh()
		if err := proto.Unmarshal(raw, message); err != nil {
			return nil, err
		}
		out[cache.GetResourceName(message)] = message
	}
	return out, nil
}

// bind is the listener on the Envoy's own address.
func bind(l *listener.Listener, address string) *listener.Listener {
	bound := proto.Clone(l).(*listener.Listener)
	bound.GetAddress().GetSocketAddress().Address = address
	return bound
}

type decoded struct {
	listeners map[string]*listener.Listener
	clusters  map[string]*cluster.Cluster
	endpoints map[string]*endpoint.ClusterLoadAssignment
}

func decodeAll(p payload) (decoded, error) {
	var d decoded
	var err error
	if d.listeners, err = decode(p.Listeners, func() *listener.Listener { return &listener.Listener{} }); err != nil {
		return d, fmt.Errorf("listeners: %w", err)
	}
	if d.clusters, err = decode(p.Clusters, func() *cluster.Cluster { return &cluster.Cluster{} }); err != nil {
		return d, fmt.Errorf("clusters: %w", err)
	}
	if d.endpoints, err = decode(p.Endpoints, func() *endpoint.ClusterLoadAssignment {
		return &endpoint.ClusterLoadAssignment{}
	}); err != nil {
		return d, fmt.Errorf("endpoints: %w", err)
	}
	return d, nil
}

func merge[T types.Resource](into map[string]types.Resource, from map[string]T) map[string]types.Resource {
	out := make(map[string]types.Resource, len(into)+len(from))
	for name, r := range into {
		out[name] = r
	}
	for name, r := range from {
		out[name] = r
	}
	return out
}

func only[T types.Resource](from map[string]T) map[string]types.Resource {
	out := make(map[string]types.Resource, len(from))
	for name, r := range from {
		out[name] = r
	}
	return out
}

func values(m map[string]types.Resource) []types.Resource {
	out := make([]types.Resource, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	return out
}

// apply puts the resources into the caches (everything when `full`) and returns the change to wait for.
func (s *state) apply(d decoded, full bool) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if full {
		s.listeners, s.clusters, s.endpoints, s.versions = map[string]map[string]types.Resource{}, nil, nil, map[key]uint64{}
	}
	number := len(s.changes) + 1
	touched := map[string]bool{}
	if full || len(d.clusters) > 0 {
		s.clusters = merge(s.clusters, d.clusters)
		touched[resource.ClusterType] = true
	}
	if full || len(d.endpoints) > 0 {
		s.endpoints = merge(s.endpoints, d.endpoints)
		touched[resource.EndpointType] = true
	}
	bound := map[string]map[string]types.Resource{}
	if full || len(d.listeners) > 0 {
		touched[resource.ListenerType] = true
		for node, address := range s.nodes {
			mine := map[string]*listener.Listener{}
			for name, l := range d.listeners {
				mine[name] = bind(l, address)
			}
			bound[node] = only(mine)
			s.listeners[node] = merge(s.listeners[node], mine)
		}
	}
	c := &change{started: time.Now(), remaining: map[key]uint64{}, done: make(chan struct{})}
	for node := range s.nodes {
		for typeURL := range touched {
			k := key{node, typeURL}
			s.versions[k]++
			c.remaining[k] = s.versions[k]
		}
	}
	if s.mode == "sotw" {
		for node := range s.nodes {
			snapshot := &cache.Snapshot{}
			snapshot.Resources[types.Cluster] = cache.NewResources(s.version(node, resource.ClusterType), values(s.clusters))
			snapshot.Resources[types.Endpoint] = cache.NewResources(s.version(node, resource.EndpointType), values(s.endpoints))
			snapshot.Resources[types.Listener] = cache.NewResources(s.version(node, resource.ListenerType), values(s.listeners[node]))
			if err := s.snapshots.SetSnapshot(context.Background(), node, snapshot); err != nil {
				return 0, err
			}
		}
	} else if err := s.applyDelta(d, full, bound); err != nil {
		return 0, err
	}
	s.changes = append(s.changes, c)
	s.byID[number] = c
	s.settle(c)
	return number, nil
}

func (s *state) version(node, typeURL string) string {
	return strconv.FormatUint(s.versions[key{node, typeURL}], 10)
}

// applyDelta updates the linear caches: one update per cache and change, so a cache's version is the
// number of updates it has had, the same count as s.versions.
func (s *state) applyDelta(d decoded, full bool, bound map[string]map[string]types.Resource) error {
	if full {
		s.linear["clusters"] = cache.NewLinearCache(resource.ClusterType)
		s.linear["endpoints"] = cache.NewLinearCache(resource.EndpointType)
		s.linear["clusters"].SetResources(s.clusters)
		s.linear["endpoints"].SetResources(s.endpoints)
		for node := range s.nodes {
			listeners := cache.NewLinearCache(resource.ListenerType)
			listeners.SetResources(s.listeners[node])
			s.linear["listeners/"+node] = listeners
		}
		caches := make(map[string]cache.Cache, len(s.linear))
		for name, c := range s.linear {
			caches[name] = c
		}
		s.mux.Caches = caches
		return nil
	}
	if len(d.clusters) > 0 {
		if err := s.linear["clusters"].UpdateResources(only(d.clusters), nil); err != nil {
			return err
		}
	}
	if len(d.endpoints) > 0 {
		if err := s.linear["endpoints"].UpdateResources(only(d.endpoints), nil); err != nil {
			return err
		}
	}
	for node, listeners := range bound {
		if err := s.linear["listeners/"+node].UpdateResources(listeners, nil); err != nil {
			return err
		}
	}
	return nil
}

// ack records that `node` ACKed `version` of `typeURL` and settles the changes it completes.
func (s *state) ack(node, typeURL string, version uint64) {
	k := key{node, typeURL}
	if version <= s.acked[k] {
		return
	}
	s.acked[k] = version
	for _, c := range s.changes {
		if want, ok := c.remaining[k]; ok && version >= want {
			delete(c.remaining, k)
			s.settle(c)
		}
	}
}

func (s *state) settle(c *change) {
	for k, want := range c.remaining {
		if s.acked[k] >= want {
			delete(c.remaining, k)
		}
	}
	if len(c.remaining) == 0 && c.seconds == 0 {
		c.seconds = time.Since(c.started).Seconds()
		close(c.done)
		kept := s.changes[:0]
		for _, other := range s.changes {
			if other != c {
				kept = append(kept, other)
			}
		}
		s.changes = kept
	}
}

func parseVersion(v string) uint64 {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

func (s *state) callbacks() server.Callbacks {
	return server.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
			if r.GetResponseNonce() != "" && r.GetErrorDetail() == nil {
				s.mu.Lock()
				s.ack(r.GetNode().GetId(), r.GetTypeUrl(), parseVersion(r.GetVersionInfo()))
				s.mu.Unlock()
			}
			return nil
		},
		StreamDeltaResponseFunc: func(id int64, _ *discovery.DeltaDiscoveryRequest, r *discovery.DeltaDiscoveryResponse) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.nonces[id] == nil {
				s.nonces[id] = map[string]uint64{}
			}
			s.nonces[id][r.GetNonce()] = parseVersion(r.GetSystemVersionInfo())
		},
		StreamDeltaRequestFunc: func(id int64, r *discovery.DeltaDiscoveryRequest) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			// Called before the server fills in the node: only a stream's first request carries it.
			if r.GetNode() != nil {
				s.streams[id] = r.GetNode().GetId()
			}
			nonce := r.GetResponseNonce()
			version, ok := s.nonces[id][nonce]
			if !ok {
				return nil
			}
			delete(s.nonces[id], nonce)
			if r.GetErrorDetail() == nil {
				s.ack(s.streams[id], r.GetTypeUrl(), version)
			}
			return nil
		},
		DeltaStreamClosedFunc: func(id int64, _ *core.Node) {
			s.mu.Lock()
			delete(s.nonces, id)
			delete(s.streams, id)
			s.mu.Unlock()
		},
	}
}

func writeJSON(w http.ResponseWriter, value any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(value); err != nil {
		log.Print(err)
	}
}

func (s *state) put(w http.ResponseWriter, r *http.Request, full bool) {
	var p payload
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
		return
	}
	d, err := decodeAll(p)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if full {
		if len(p.Nodes) == 0 {
			http.Error(w, "nodes: at least one node id and its listener address are required", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.nodes = p.Nodes
		s.mu.Unlock()
	} else if s.nodes == nil {
		http.Error(w, "PUT /resources first", http.StatusConflict)
		return
	}
	number, err := s.apply(d, full)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, map[string]int{"change": number})
}

func (s *state) converged(w http.ResponseWriter, r *http.Request) {
	number, err := strconv.Atoi(r.URL.Query().Get("change"))
	if err != nil {
		http.Error(w, "change: an integer is required", http.StatusBadRequest)
		return
	}
	timeout, err := strconv.ParseFloat(r.URL.Query().Get("timeout"), 64)
	if err != nil {
		timeout = 120
	}
	s.mu.Lock()
	c := s.byID[number]
	s.mu.Unlock()
	if c == nil {
		http.Error(w, fmt.Sprintf("change: no change %d", number), http.StatusNotFound)
		return
	}
	select {
	case <-c.done:
		writeJSON(w, map[string]float64{"seconds": c.seconds})
	case <-time.After(time.Duration(timeout * float64(time.Second))):
		s.mu.Lock()
		waiting := make([]string, 0, len(c.remaining))
		for k := range c.remaining {
			waiting = append(waiting, k.node+" "+k.typeURL)
		}
		s.mu.Unlock()
		http.Error(w, "not converged, waiting for: "+strings.Join(waiting, ", "), http.StatusGatewayTimeout)
	}
}

func stats(w http.ResponseWriter, _ *http.Request) {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	seconds := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	writeJSON(w, map[string]float64{
		"cpu_seconds": seconds(usage.Utime) + seconds(usage.Stime),
		"rss_mib":     rssMiB(),
	})
}

func rssMiB() float64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if fields := strings.Fields(line); len(fields) >= 2 && fields[0] == "VmRSS:" {
			kib, _ := strconv.ParseFloat(fields[1], 64)
			return kib / 1024
		}
	}
	return 0
}

func main() {
	mode := flag.String("mode", "delta", "sotw (SnapshotCache) or delta (LinearCache per type behind a MuxCache)")
	xdsAddress := flag.String("xds", "127.0.0.1:18000", "ADS gRPC address")
	controlAddress := flag.String("control", "127.0.0.1:18001", "control API address")
	flag.Parse()
	if *mode != "sotw" && *mode != "delta" {
		log.Fatalf("-mode: sotw or delta, not %q", *mode)
	}
	s := newState(*mode)
	var watcher cache.Cache = s.mux
	if *mode == "sotw" {
		watcher = s.snapshots
	}
	ctx := context.Background()
	xds := server.NewServer(ctx, watcher, s.callbacks())
	// As go-control-plane's example server: Envoy pings its xDS connection every 30 s (tollgate's bootstrap),
	// which gRPC's default enforcement (5 minutes) answers by closing the connection.
	grpcServer := grpc.NewServer(
		grpc.MaxConcurrentStreams(1000000),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
	)
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(grpcServer, xds)
	listen, err := net.Listen("tcp", *xdsAddress)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		if err := grpcServer.Serve(listen); err != nil {
			log.Fatal(err)
		}
	}()
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /resources", func(w http.ResponseWriter, r *http.Request) { s.put(w, r, true) })
	mux.HandleFunc("POST /change", func(w http.ResponseWriter, r *http.Request) { s.put(w, r, false) })
	mux.HandleFunc("GET /converged", s.converged)
	mux.HandleFunc("GET /stats", stats)
	if err := http.ListenAndServe(*controlAddress, mux); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
