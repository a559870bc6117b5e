package fsm

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/keys"
	"github.com/stele-io/stele/internal/fsm/plugins"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/schemas"
	"github.com/stele-io/stele/internal/fsm/security"
	"github.com/stele-io/stele/internal/fsm/shares"
	"github.com/stele-io/stele/internal/fsm/subjects"
	"github.com/stele-io/stele/internal/fsm/tenants"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
	"github.com/stele-io/stele/internal/fsm/views"
)

// modApp stands, in this test, for the application's own files (app.go,
// core_api.go and the modules' *_api.go aliases): the assembly of the
// modules, which may use every module and which no module uses (a module
// package cannot import this package). The core itself is the package
// core (core/), which Go's import rules keep from naming any module.
const modApp core.Module = "app"

// modulePackages are the modules that are packages of their own, by
// directory. TestModuleLayering reads what they declare (a use of it from
// this package is a use of the module) and does not check their own
// files: Go's import rules keep a module package from naming any module
// above it, as the core from naming any module.
var modulePackages = map[string]core.Module{"topics": topics.ModTopics, "keys": keys.ModKeys, "groups": groups.ModGroups, "trust": trust.ModTrust, "producers": producers.ModProducers, "cluster": cluster.ModCluster, "security": security.ModSecurity, "tenants": tenants.ModTenants, "subjects": subjects.ModSubjects, "views": views.ModViews, "schemas": schemas.ModSchemas, "shares": shares.ModShares, "plugins": plugins.ModPlugins}

// The files of this package, by what they are: every module is a package
// of its own (modulePackages), so this package's files are the
// application's. A new file names itself here; TestModuleLayering refuses
// a file it cannot place.
var fileModules = map[string]core.Module{
	"app.go": modApp, "core_api.go": modApp, "topics_api.go": modApp, "keys_api.go": modApp, "groups_api.go": modApp, "trust_api.go": modApp, "producers_api.go": modApp, "cluster_api.go": modApp, "security_api.go": modApp, "tenants_api.go": modApp, "subjects_api.go": modApp, "views_api.go": modApp, "schemas_api.go": modApp, "shares_api.go": modApp, "plugins_api.go": modApp,
}

// allowedCalls is the layering: which modules a module's code may use
// (call, read the state of, or name the types of). The core (package
// core) is the bottom layer: it uses no module, which Go's import rules
// enforce, and every module uses it (blocks, the store, results, the
// codec, the registries); no module uses the application (modApp), which
// hands each its part of a state machine. The core runs the modules only through
// what they register (core/registry.go): commands and their admission, steps
// (empty, load, stage, sync, publish, settle, forget, close), command
// gates, block-begin and block-end steps, transaction forms, the digest domain, the m/state
// mark and snapshot files. The application (this package) assembles
// them: Open makes each module's part and buildRegistry calls each
// module's registration function. Above the core the modules
// form a DAG (TestLayeringIsADAG), from the bottom up:
//
//	topics              topics, partition logs and what a log keeps of its
//	                    producers (sequences, last stable offset, aborted
//	                    transactions, markers), as Kafka's log does
//	keys, subjects,     use topics
//	groups, trust
//	views               uses topics and subjects (the summaries of its copies)
//	producers           uses topics and groups (producer ids, transactions:
//	                    a commit writes markers and applies group offsets)
//	cluster             uses trust, and topics' config definitions
//	security            uses cluster (the app version, stele.admin.signed),
//	                    trust (the keys that sign administration), and
//	                    topics and groups (the commands it gates)
//	schemas             uses cluster (the app version) and topics (a
//	                    produce check validates records)
//	shares              uses topics (the logs it reads), groups (a share
//	                    group's name is not a consumer group's) and cluster
//	                    (the app version)
//	plugins             uses topics (the produce hook, the topics deployed
//	                    to) and cluster (the app version)
//	tenants             uses every module but keys, subjects and views: the names a tenant
//	                    owns in each (topics, groups, transactional ids,
//	                    users, ACLs, quotas, producer keys, schemas, share
//	                    groups, plugins), the app
//	                    version, and signed administration's extension point
//
// A lower module reaches an upper one only through the hook points it
// offers (topic_hooks.go), which the upper module registers itself for;
// the hooks' order is pinned by TestHooks. Every edge listed is used
// (TestModuleLayering), so the map says what the code does. Every module
// is a package (modulePackages), so Go's import rules keep the DAG too: a
// cycle would not compile.
var allowedCalls = map[core.Module][]core.Module{
	modApp:                 {},
	topics.ModTopics:       {},
	keys.ModKeys:           {topics.ModTopics},
	subjects.ModSubjects:   {topics.ModTopics},
	views.ModViews:         {topics.ModTopics, subjects.ModSubjects},
	groups.ModGroups:       {topics.ModTopics},
	producers.ModProducers: {topics.ModTopics, groups.ModGroups},
	trust.ModTrust:         {topics.ModTopics},
	cluster.ModCluster:     {topics.ModTopics, trust.ModTrust},                                                                                                                                               // topics: the config definitions and changes (configs.go) broker configs reuse
	security.ModSecurity:   {topics.ModTopics, groups.ModGroups, trust.ModTrust, cluster.ModCluster},                                                                                                         // the commands signed administration gates, the producer keys that sign them, the app version and the setting
	schemas.ModSchemas:     {topics.ModTopics, cluster.ModCluster},                                                                                                                                           // the app version, the produce checks (validate.go)
	shares.ModShares:       {topics.ModTopics, groups.ModGroups, cluster.ModCluster},                                                                                                                         // the logs it reads, the consumer groups' names, the app version
	plugins.ModPlugins:     {topics.ModTopics, cluster.ModCluster},                                                                                                                                           // the produce hook and the topics deployed to, the app version
	tenants.ModTenants:     {topics.ModTopics, groups.ModGroups, producers.ModProducers, trust.ModTrust, cluster.ModCluster, security.ModSecurity, schemas.ModSchemas, shares.ModShares, plugins.ModPlugins}, // what a tenant owns in each, the app version, signed administration
}

// TestModuleLayering checks that each module package imports only the
// modules allowedCalls lets it, and fails on an edge allowedCalls lists
// that no import uses. Every module is a package, so an import is the
// one way a module uses another (its types, functions, state); this
// package's own files are the application's (fileModules), which may use
// every module, and FSM embeds only the modules' parts
// (checkFSMEmbeds).
func TestModuleLayering(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if _, ok := fileModules[name]; !ok {
			t.Errorf("%s belongs to no module: name it in fileModules (modules_test.go)", name)
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	for name := range fileModules {
		if _, ok := files[name]; !ok {
			t.Errorf("fileModules names %s, which is not in the package", name)
		}
	}
	pkgFiles := map[string]*ast.File{} // the module packages' files, by path
	for _, dir := range sortedModulePackages() {
		des, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range des {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			path := filepath.Join(dir, e.Name())
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			pkgFiles[path] = f
		}
	}
	checkFSMEmbeds(t, files, pkgFiles)
	type edge struct{ from, to core.Module }
	uses := map[edge][]string{}
	// A module package's edges are its imports of other module packages.
	for _, path := range core.SortedKeys(pkgFiles) {
		from := modulePackages[filepath.Dir(path)]
		for _, is := range pkgFiles[path].Imports {
			dir, ok := strings.CutPrefix(strings.Trim(is.Path.Value, `"`), "github.com/stele-io/stele/internal/fsm/")
			if to, isModule := modulePackages[dir]; ok && isModule && to != from {
				e := edge{from, to}
				if len(uses[e]) < 3 {
					uses[e] = append(uses[e], fmt.Sprintf("%s imports %s", path, dir))
				}
			}
		}
	}
	var edges []edge
	for e := range uses {
		edges = append(edges, e)
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].from != edges[j].from {
			return edges[i].from < edges[j].from
		}
		return edges[i].to < edges[j].to
	})
	for _, e := range edges {
		if !slices.Contains(allowedCalls[e.from], e.to) {
			t.Errorf("module %s uses module %s, which allowedCalls does not let it: %s", e.from, e.to, strings.Join(uses[e], "; "))
		}
	}
	for _, from := range sortedModules(allowedCalls) {
		for _, to := range allowedCalls[from] {
			if len(uses[edge{from, to}]) == 0 {
				t.Errorf("allowedCalls lets module %s use module %s, which it does not: drop the edge", from, to)
			}
		}
	}
	if testing.Verbose() {
		for _, e := range edges {
			t.Logf("%s -> %s: %s", e.from, e.to, strings.Join(uses[e], "; "))
		}
	}
}

// sortedModulePackages are modulePackages' directories, sorted.
func sortedModulePackages() []string { return core.SortedKeys(modulePackages) }

// checkFSMEmbeds reads FSM from the source: beside the core's Machine
// and its own named fields it embeds only the modules' parts, struct
// types declared in the module packages. It fails the test on any other
// embedded field, and on an exported field two modules' parts declare
// (FSM could not promote it).
func checkFSMEmbeds(t *testing.T, files, pkgFiles map[string]*ast.File) {
	t.Helper()
	// Struct types by name: this package's by their name, a module
	// package's by dir.Name.
	structs := map[string]*ast.StructType{}
	structModule := map[string]core.Module{}
	var fsm *ast.StructType
	collect := func(prefix string, m func(file string) core.Module, fs map[string]*ast.File) {
		for _, name := range core.SortedKeys(fs) {
			for _, d := range fs[name].Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok {
					continue
				}
				for _, s := range g.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					structs[prefix+ts.Name.Name], structModule[prefix+ts.Name.Name] = st, m(name)
					if prefix == "" && ts.Name.Name == "FSM" {
						fsm = st
					}
				}
			}
		}
	}
	collect("", func(file string) core.Module { return fileModules[file] }, files)
	for _, dir := range sortedModulePackages() {
		collect(dir+".", func(string) core.Module { return modulePackages[dir] }, pkgFiles)
	}
	if fsm == nil {
		t.Fatal("no struct type FSM in the package")
	}
	fields := map[string]core.Module{}
	embedded := 0
	for _, fl := range fsm.Fields.List {
		if len(fl.Names) > 0 {
			continue // the application's
		}
		if st, ok := fl.Type.(*ast.StarExpr); ok {
			if sel, ok := st.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "Machine" {
				continue // the core's machine
			}
			if id, ok := st.X.(*ast.Ident); ok && id.Name == "Machine" {
				continue // the core's machine, before the core moved
			}
		}
		embedded++
		typ := fl.Type
		if st, ok := typ.(*ast.StarExpr); ok {
			typ = st.X // a module's own type (topics.Topics), embedded by pointer
		}
		key, prefix := "", ""
		switch x := typ.(type) {
		case *ast.Ident:
			key = x.Name
		case *ast.SelectorExpr:
			if pkg, ok := x.X.(*ast.Ident); ok {
				prefix = pkg.Name + "."
				key = prefix + x.Sel.Name
			}
		}
		if key == "" || structs[key] == nil || structModule[key] == modApp {
			t.Errorf("FSM embeds %v: only a module's state struct or type, declared in that module's files, belongs there", fl.Type)
			continue
		}
		m := structModule[key]
		// The struct's fields, and those of the module's structs it
		// embeds (Topics embeds topicsState).
		var add func(st *ast.StructType)
		add = func(st *ast.StructType) {
			for _, sf := range st.Fields.List {
				for _, n := range sf.Names {
					if prefix != "" && !n.IsExported() {
						continue // a module package's own, never reached from here
					}
					if o, ok := fields[n.Name]; ok {
						t.Errorf("field %s is declared by the state of modules %s and %s", n.Name, o, m)
					}
					fields[n.Name] = m
				}
				if len(sf.Names) == 0 {
					if eid, ok := sf.Type.(*ast.Ident); ok && structs[prefix+eid.Name] != nil && structModule[prefix+eid.Name] == m {
						add(structs[prefix+eid.Name])
					}
				}
			}
		}
		add(structs[key])
	}
	if embedded == 0 || len(fields) == 0 {
		t.Errorf("FSM embeds %d module states with %d fields: the layering test would see no module's state", embedded, len(fields))
	}
}

// TestLayeringIsADAG: the modules' layering (allowedCalls without the
// core's row, see there) has no cycle, and no module names the core, which
// every module uses anyway.
func TestLayeringIsADAG(t *testing.T) {
	modules := map[core.Module][]core.Module{}
	for from, tos := range allowedCalls {
		if slices.Contains(tos, modApp) {
			t.Errorf("allowedCalls[%s] names the core: every module uses it, leave it out", from)
		}
		if from != modApp {
			modules[from] = tos
		}
	}
	if c := layeringCycle(modules); c != nil {
		t.Errorf("allowedCalls has a cycle: %v; a lower module reaches an upper one through a hook point (topic_hooks.go)", c)
	}
	// The check itself finds a cycle, and none where there is none.
	if c := layeringCycle(map[core.Module][]core.Module{topics.ModTopics: {keys.ModKeys}, keys.ModKeys: {groups.ModGroups}, groups.ModGroups: {topics.ModTopics}}); len(c) != 4 {
		t.Errorf("a three-module cycle: found %v", c)
	}
	if c := layeringCycle(map[core.Module][]core.Module{topics.ModTopics: {}, keys.ModKeys: {topics.ModTopics}, groups.ModGroups: {topics.ModTopics, keys.ModKeys}}); c != nil {
		t.Errorf("a DAG: found the cycle %v", c)
	}
}

// layeringCycle returns a cycle of g (its first module repeated at its end),
// or nil when g is a DAG.
func layeringCycle(g map[core.Module][]core.Module) []core.Module {
	const (
		unseen = iota
		onPath
		done
	)
	state := map[core.Module]int{}
	var path []core.Module
	var visit func(m core.Module) []core.Module
	visit = func(m core.Module) []core.Module {
		switch state[m] {
		case onPath:
			i := slices.Index(path, m)
			return append(slices.Clone(path[i:]), m)
		case done:
			return nil
		}
		state[m] = onPath
		path = append(path, m)
		for _, n := range g[m] {
			if c := visit(n); c != nil {
				return c
			}
		}
		path = path[:len(path)-1]
		state[m] = done
		return nil
	}
	for _, m := range sortedModules(g) {
		if c := visit(m); c != nil {
			return c
		}
	}
	return nil
}

func sortedModules(g map[core.Module][]core.Module) []core.Module {
	ms := make([]core.Module, 0, len(g))
	for m := range g {
		ms = append(ms, m)
	}
	slices.Sort(ms)
	return ms
}

// TestHooks: each hook point's hooks run in a strict order of rank, each
// registered by a module above the point's owner (allowedCalls lets it use
// the owner); the order is part of what is hashed (TestGoldenAppHashes
// was made with it): the checks decide which refusal a produce gets, the
// hooks that write stage their keys in this order.
func TestHooks(t *testing.T) {
	got := map[string][]string{}
	for _, p := range assembled.Points() {
		name, owner, hooks := p.Describe()
		if _, ok := got[name]; ok {
			t.Errorf("two hook points named %q", name)
		}
		got[name] = []string{}
		for i, h := range hooks {
			if i > 0 && hooks[i-1].Rank >= h.Rank {
				t.Errorf("%s: hook %s (rank %d) after %s (rank %d)", name, h.Name, h.Rank, hooks[i-1].Name, hooks[i-1].Rank)
			}
			if !slices.Contains(allowedCalls[h.Module], owner) {
				t.Errorf("%s: hook %s of module %s, which may not use %s (allowedCalls)", name, h.Name, h.Module, owner)
			}
			got[name] = append(got[name], fmt.Sprintf("%d %s: %s", h.Rank, h.Module, h.Name))
		}
	}
	want := map[string][]string{
		"batch checks":       {"10 producers: transactions"},
		"produce checks":     {"10 keys: expected versions", "20 trust: signatures", "30 tenants: tenant's stored bytes", "40 schemas: schema validation", "50 plugins: plugin state"},
		"batch appended":     {"10 keys: table versions", "20 keys: key stream entries", "25 subjects: subject summaries", "40 views: view copies"},
		"marker written":     {"10 keys: table versions of a committed transaction", "40 views: view copies of what a transaction's end made stable"},
		"log trimmed":        {"10 keys: table leaves below the log start", "20 subjects: subject summaries", "40 views: view log starts"},
		"compaction decided": {"10 keys: tombstones a compaction removes"},
		"config changed":     {"10 keys: table leaves of a changed cleanup.policy"},
		"topic deleted":      {"10 groups: committed offsets of the topic", "15 shares: share partitions of the topic", "20 plugins: plugins on the topic"},
		"transforms":         {"10 plugins: produce plugins"},
		"topic dropped":      {"10 keys: key stream entries", "20 keys: table leaves", "25 subjects: subject summaries and counts"},
		"housekeeping":       {"10 groups: committed offsets' expiry", "20 producers: transactional ids' expiry"},
	}
	for _, name := range core.SortedKeys(want) {
		if !slices.Equal(got[name], want[name]) {
			t.Errorf("hook point %s: hooks %q, want %q (a new hook needs a rank; moving one changes what is hashed)", name, got[name], want[name])
		}
	}
	for _, name := range core.SortedKeys(got) {
		if _, ok := want[name]; !ok {
			t.Errorf("hook point %s is not pinned in TestHooks: %q", name, got[name])
		}
	}
}

// TestRegistry: every command kind from 1 to the highest is registered
// once, under its type's name, by a known module, with a decoder and an
// apply; and Kind's name and decodeCommand come from the registry.
func TestRegistry(t *testing.T) {
	highest := 0
	for k, s := range assembled.Commands {
		if s == nil {
			continue
		}
		highest = k
		if s.Kind != core.Kind(k) || s.Decode == nil || s.Apply == nil {
			t.Errorf("kind %d: %+v", k, s)
		}
		if _, ok := allowedCalls[s.Module]; !ok && s.Module != core.ModCore {
			t.Errorf("kind %d (%s) registered by an unknown module %q", k, s.Name, s.Module)
		}
		c := s.Decode(&core.Reader{})
		pkg := "fsm."
		if s.Module == core.ModCore {
			pkg = "core."
		}
		for dir, m := range modulePackages {
			if s.Module == m {
				pkg = dir + "."
			}
		}
		if got := fmt.Sprintf("%T", c); got != pkg+s.Name {
			t.Errorf("kind %d is named %s but decodes to %s", k, s.Name, got)
		}
		if KindName(core.Kind(k)) != s.Name {
			t.Errorf("kind %d: String %q, registered %q", k, KindName(core.Kind(k)), s.Name)
		}
	}
	for k := 1; k <= highest; k++ {
		if assembled.Commands[k] == nil {
			t.Errorf("kind %d is not registered (kinds are never reused; a gap is a command whose module forgot to register it)", k)
		}
	}
	var r core.Reader
	r.B = []byte{1}
	if assembled.DecodeCommand(core.Kind(highest+1), &r); r.E == nil {
		t.Errorf("decoding unregistered kind %d: no error", highest+1)
	}
}

// TestSteps: the modules' steps run in a strict order of rank, each of a
// known module and doing something; the order is what the golden app
// hashes were made with (TestGoldenAppHashes), and the order in which
// Open loads the modules' state: the app version before the topics
// (nothing of a state a binary cannot run is opened), the topics before
// what refers to them (the producers' and transactions' partitions). And
// the block-end steps (ApplyBlock's timers and housekeeping), in the order
// their changes are made and hashed; and the modules' snapshot files.
func TestSteps(t *testing.T) {
	reg := assembled
	var names []string
	for i, s := range reg.Steps {
		if i > 0 && reg.Steps[i-1].Rank >= s.Rank {
			t.Errorf("step %s (rank %d) after %s (rank %d)", s.Name, s.Rank, reg.Steps[i-1].Name, reg.Steps[i-1].Rank)
		}
		if _, ok := allowedCalls[s.Module]; !ok || s.Empty == nil && s.Load == nil && s.Stage == nil && s.Publish == nil && s.Sync == nil && s.Settle == nil && s.Forget == nil && s.Close == nil {
			t.Errorf("step %s: module %q does nothing", s.Name, s.Module)
		}
		parts := ""
		for _, p := range []struct {
			name string
			set  bool
		}{{"empty", s.Empty != nil}, {"load", s.Load != nil}, {"stage", s.Stage != nil}, {"sync", s.Sync != nil}, {"publish", s.Publish != nil},
			{"settle", s.Settle != nil}, {"forget", s.Forget != nil}, {"close", s.Close != nil}} {
			if p.set {
				parts += " " + p.name
			}
		}
		names = append(names, fmt.Sprintf("%d %s:%s", s.Rank, s.Name, parts))
	}
	want := []string{
		"5 partitions and the topics view: publish",
		"10 next producer id: load stage",
		"20 signers and certificates: empty load stage publish",
		"30 key stream entries: stage forget",
		"32 subject summaries and counts: stage forget",
		"40 producer keys and signed sequences: stage",
		"50 app version and upgrades: load stage publish",
		"51 membership: load stage publish",
		"52 dynamic broker configs: load stage publish",
		"55 cluster-wide log defaults: load stage",
		"56 log append clock: load stage",
		"60 topics and partitions: empty load stage sync settle forget close",
		"80 table versions: stage",
		"90 groups and committed offsets: empty load stage publish forget",
		"100 partitions' producer states: load stage",
		"110 transactions: empty load stage publish forget",
		"115 partitions' aborted transactions: load stage",
		"120 users: empty load stage publish",
		"125 ACLs: empty load stage publish",
		"130 client quotas: empty load stage publish",
		"135 ip quotas: empty load stage publish",
		"137 plugins: empty load stage publish close",
		"138 schemas: empty load stage publish",
		"139 share groups: empty load stage publish",
		"140 tenants: empty load stage publish",
	}
	if !slices.Equal(names, want) {
		t.Errorf("steps %q, want %q (a new step needs a rank; moving one changes what is hashed, or what a load may refer to)", names, want)
	}

	// The block-end steps: their changes are hashed in this order, and
	// each sees the state the ones before it left.
	names = nil
	for i, s := range reg.BlockEndSteps {
		if i > 0 && reg.BlockEndSteps[i-1].Rank >= s.Rank {
			t.Errorf("block-end step %s (rank %d) after %s (rank %d)", s.Name, s.Rank, reg.BlockEndSteps[i-1].Name, reg.BlockEndSteps[i-1].Rank)
		}
		if _, ok := allowedCalls[s.Module]; !ok || s.Module == core.ModCore || s.Run == nil {
			t.Errorf("block-end step %s: module %q, run %v", s.Name, s.Module, s.Run != nil)
		}
		names = append(names, fmt.Sprintf("%d %s: %s", s.Rank, s.Module, s.Name))
	}
	want = []string{
		"5 trust: expired certificates",
		"10 groups: sessions and rebalance deadlines",
		"15 shares: share sessions and acquisition locks",
		"20 producers: transaction timeouts",
		"30 topics: housekeeping",
	}
	if !slices.Equal(names, want) {
		t.Errorf("block-end steps %q, want %q (a new step needs a rank; moving one changes what is hashed)", names, want)
	}

	// The modules' files in a snapshot, in the order they are captured
	// and moved into place at a restore.
	names = nil
	for i, s := range reg.SnapshotFileSteps {
		if i > 0 && reg.SnapshotFileSteps[i-1].Rank >= s.Rank {
			t.Errorf("snapshot files %s (rank %d) after %s (rank %d)", s.Name, s.Rank, reg.SnapshotFileSteps[i-1].Name, reg.SnapshotFileSteps[i-1].Rank)
		}
		if _, ok := allowedCalls[s.Module]; !ok || s.Module == core.ModCore || s.Capture == nil || s.CheckPath == nil {
			t.Errorf("snapshot files %s: module %q, capture %v, checkPath %v", s.Name, s.Module, s.Capture != nil, s.CheckPath != nil)
		}
		names = append(names, fmt.Sprintf("%d %s: %s in %s/", s.Rank, s.Module, s.Name, s.Dir))
	}
	want = []string{"10 topics: partition logs in logs/"}
	if !slices.Equal(names, want) {
		t.Errorf("snapshot files %q, want %q (the snapshot format names these directories)", names, want)
	}

	// The block-begin steps: an upgrade this binary cannot run refuses the
	// block before anything runs; the signers are noted at the block's time.
	names = nil
	for i, s := range reg.BlockBeginSteps {
		if i > 0 && reg.BlockBeginSteps[i-1].Rank >= s.Rank {
			t.Errorf("block-begin step %s (rank %d) after %s (rank %d)", s.Name, s.Rank, reg.BlockBeginSteps[i-1].Name, reg.BlockBeginSteps[i-1].Rank)
		}
		if _, ok := allowedCalls[s.Module]; !ok || s.Module == core.ModCore || s.Check == nil && s.Run == nil {
			t.Errorf("block-begin step %s: module %q, check %v, run %v", s.Name, s.Module, s.Check != nil, s.Run != nil)
		}
		names = append(names, fmt.Sprintf("%d %s: %s", s.Rank, s.Module, s.Name))
	}
	want = []string{"10 cluster: upgrades", "12 cluster: evidence", "13 cluster: downtime", "20 trust: signers", "30 topics: log append clock", "40 security: genesis users"}
	if !slices.Equal(names, want) {
		t.Errorf("block-begin steps %q, want %q", names, want)
	}
	names = nil
	for _, f := range reg.TxFormats {
		if f.Is == nil || f.Open == nil || f.Halts == nil {
			t.Errorf("transaction form %s is missing a function", f.Name)
		}
		names = append(names, fmt.Sprintf("%s: %s", f.Module, f.Name))
	}
	if want = []string{"trust: certified"}; !slices.Equal(names, want) || reg.DigestDomainOf == nil {
		t.Errorf("transaction forms %q, want %q; digest domain registered %v", names, want, reg.DigestDomainOf != nil)
	}

	// The one field of m/state a module owns: its place in the record is
	// the stored format's (persist.go).
	if reg.StateMark == nil || reg.StateMark.Module != topics.ModTopics || reg.StateMark.Name != "last housekeeping" || reg.StateMark.Value == nil || reg.StateMark.Restore == nil {
		t.Errorf("state mark %+v, want the topics' last housekeeping", reg.StateMark)
	}
}

// TestInsertRanked: the registries keep their entries in rank order
// whatever order the modules registered them in, and refuse a second
// entry of one rank.
func TestInsertRanked(t *testing.T) {
	key := func(s *core.BlockEndStep) (int, string) { return s.Rank, s.Name }
	var list []*core.BlockEndStep
	for _, r := range []int{30, 10, 20} {
		list = core.InsertRanked(list, &core.BlockEndStep{Rank: r, Name: fmt.Sprint("step", r)}, "block-end steps", key)
	}
	if got := []int{list[0].Rank, list[1].Rank, list[2].Rank}; !slices.Equal(got, []int{10, 20, 30}) {
		t.Fatalf("ranks %v, want [10 20 30]", got)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "step20 and again both of rank 20") {
			t.Fatalf("a second entry of rank 20: recovered %v, want a panic naming both", r)
		}
	}()
	core.InsertRanked(list, &core.BlockEndStep{Rank: 20, Name: "again"}, "block-end steps", key)
}

// TestRegistryOrder: buildRegistry's order of the modules' registration
// functions decides nothing but that the topics come first (registry.go),
// and the security module before the tenants module, which adds its
// commands to signed administration's extension point:
// the modules above them registered in the reverse order give the same
// registry, ranks and names alike; and a module registered before the
// topics, whose hook points it needs, is refused at once.
func TestRegistryOrder(t *testing.T) {
	reversed := newRegistry()
	reversed.TopicHooks = topics.RegisterTopics(reversed.Registry)
	for _, register := range []func(*registry){func(r *registry) {
		r.AdminGates = security.RegisterSecurity(r.Registry)
		tenants.RegisterTenants(r.Registry, r.AdminGates, r.TopicHooks)
		registerPlugins(r)
	}, func(r *registry) { shares.RegisterShares(r.Registry, r.TopicHooks) }, func(r *registry) { schemas.RegisterSchemas(r.Registry, r.TopicHooks) }, func(r *registry) { cluster.RegisterCluster(r.Registry, r.TopicHooks) }, func(r *registry) { trust.RegisterTrust(r.Registry, r.TopicHooks) }, func(r *registry) { producers.RegisterProducers(r.Registry, r.TopicHooks) }, func(r *registry) { groups.RegisterGroups(r.Registry, r.TopicHooks) },
		func(r *registry) { views.RegisterViews(r.TopicHooks) },
		func(r *registry) { keys.RegisterKeys(r.Registry, r.TopicHooks) }, func(r *registry) { subjects.RegisterSubjects(r.Registry, r.TopicHooks) }} {
		register(reversed)
	}
	if got, want := describeRegistry(reversed), describeRegistry(assembled); !slices.Equal(got, want) {
		t.Errorf("registered in another order:\n%s\nbuildRegistry's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "hook point not made yet") {
			t.Errorf("the keys registered before the topics: recovered %v, want a panic", r)
		}
	}()
	unmade := newRegistry()
	keys.RegisterKeys(unmade.Registry, unmade.TopicHooks)
}

// describeRegistry lists what r holds, in its order, without functions.
func describeRegistry(r *registry) []string {
	var out []string
	for k, s := range r.Commands {
		if s != nil {
			out = append(out, fmt.Sprintf("command %d %s %s", k, s.Module, s.Name))
		}
	}
	for _, s := range r.Steps {
		out = append(out, fmt.Sprintf("step %d %s %s", s.Rank, s.Module, s.Name))
	}
	for _, s := range r.BlockBeginSteps {
		out = append(out, fmt.Sprintf("block-begin %d %s %s", s.Rank, s.Module, s.Name))
	}
	for _, s := range r.BlockEndSteps {
		out = append(out, fmt.Sprintf("block-end %d %s %s", s.Rank, s.Module, s.Name))
	}
	for _, s := range r.TxFormats {
		out = append(out, fmt.Sprintf("tx format %s %s", s.Module, s.Name))
	}
	for _, s := range r.SnapshotFileSteps {
		out = append(out, fmt.Sprintf("snapshot files %d %s %s %s", s.Rank, s.Module, s.Name, s.Dir))
	}
	if r.StateMark != nil {
		out = append(out, fmt.Sprintf("state mark %s %s", r.StateMark.Module, r.StateMark.Name))
	}
	out = append(out, fmt.Sprintf("digest domain %v", r.DigestDomainOf != nil))
	for _, p := range r.Points() {
		name, owner, hooks := p.Describe()
		for _, h := range hooks {
			out = append(out, fmt.Sprintf("hook %s (%s) %d %s %s", name, owner, h.Rank, h.Module, h.Name))
		}
	}
	return out
}
