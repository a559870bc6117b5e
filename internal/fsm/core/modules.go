package core

// Registration in a module's own terms. The core runs functions of
// *Machine; a module's code works on its own type M (its state, the
// machine it runs on and what it needs of the modules below it), which
// the module finds for a machine with its function of (the application
// hands it over: the machine's App). These are the core's registrations with
// functions of M, and what turns them into the core's.

// ModuleStep is a Step with functions of M.
type ModuleStep[M any] struct {
	Rank    int
	Name    string
	Module  Module
	Empty   func(M)
	Load    func(M) error
	Stage   func(M, *StateBatch) error
	Publish func(f M, metaChanged bool)
	Sync    func(M) error
	Settle  func(M) error
	Forget  func(M)
	Close   func(M)
}

// RegisterModuleStep adds s, its functions given of(machine).
func RegisterModuleStep[M any](r *Registry, of func(*Machine) M, s ModuleStep[M]) {
	c := Step{Rank: s.Rank, Name: s.Name, Module: s.Module}
	if s.Empty != nil {
		c.Empty = func(m *Machine) { s.Empty(of(m)) }
	}
	if s.Load != nil {
		c.Load = func(m *Machine) error { return s.Load(of(m)) }
	}
	if s.Stage != nil {
		c.Stage = func(m *Machine, b *StateBatch) error { return s.Stage(of(m), b) }
	}
	if s.Publish != nil {
		c.Publish = func(m *Machine, metaChanged bool) { s.Publish(of(m), metaChanged) }
	}
	if s.Sync != nil {
		c.Sync = func(m *Machine) error { return s.Sync(of(m)) }
	}
	if s.Settle != nil {
		c.Settle = func(m *Machine) error { return s.Settle(of(m)) }
	}
	if s.Forget != nil {
		c.Forget = func(m *Machine) { s.Forget(of(m)) }
	}
	if s.Close != nil {
		c.Close = func(m *Machine) { s.Close(of(m)) }
	}
	r.RegisterStep(c)
}

// ModuleBlockBegin is a BlockBeginStep with functions of M.
type ModuleBlockBegin[M any] struct {
	Rank   int
	Name   string
	Module Module
	Check  func(f M, height int64) error
	Run    func(M, Block)
}

// RegisterModuleBlockBegin adds s, its functions given of(machine).
func RegisterModuleBlockBegin[M any](r *Registry, of func(*Machine) M, s ModuleBlockBegin[M]) {
	c := BlockBeginStep{Rank: s.Rank, Name: s.Name, Module: s.Module}
	if s.Check != nil {
		c.Check = func(m *Machine, height int64) error { return s.Check(of(m), height) }
	}
	if s.Run != nil {
		c.Run = func(m *Machine, b Block) { s.Run(of(m), b) }
	}
	r.RegisterBlockBegin(c)
}

// ModuleBlockEnd is a BlockEndStep with a function of M.
type ModuleBlockEnd[M any] struct {
	Rank   int
	Name   string
	Module Module
	Run    func(M) []Change
}

// RegisterModuleBlockEnd adds s, its function given of(machine).
func RegisterModuleBlockEnd[M any](r *Registry, of func(*Machine) M, s ModuleBlockEnd[M]) {
	r.RegisterBlockEnd(BlockEndStep{Rank: s.Rank, Name: s.Name, Module: s.Module,
		Run: func(m *Machine) []Change { return s.Run(of(m)) }})
}

// ModuleSnapshotFiles are SnapshotFiles with a capture of M.
type ModuleSnapshotFiles[M any] struct {
	Rank      int
	Name      string
	Module    Module
	Dir       string
	Capture   func(M) ([]CapturedFiles, error)
	CheckPath func(rest string) string
}

// RegisterModuleSnapshotFiles adds s, its capture given of(machine).
func RegisterModuleSnapshotFiles[M any](r *Registry, of func(*Machine) M, s ModuleSnapshotFiles[M]) {
	r.RegisterSnapshotFiles(SnapshotFiles{Rank: s.Rank, Name: s.Name, Module: s.Module, Dir: s.Dir, CheckPath: s.CheckPath,
		Capture: func(m *Machine) ([]CapturedFiles, error) { return s.Capture(of(m)) }})
}

// ModuleStateMark is a StateMark with functions of M.
type ModuleStateMark[M any] struct {
	Name    string
	Module  Module
	Value   func(M) int64
	Restore func(M, int64)
}

// RegisterModuleStateMark registers s, its functions given of(machine).
func RegisterModuleStateMark[M any](r *Registry, of func(*Machine) M, s ModuleStateMark[M]) {
	r.RegisterStateMark(StateMark{Name: s.Name, Module: s.Module,
		Value:   func(m *Machine) int64 { return s.Value(of(m)) },
		Restore: func(m *Machine, v int64) { s.Restore(of(m), v) }})
}

// RegisterModuleCommand adds a command kind whose apply is given
// of(machine) (RegisterCommand).
func RegisterModuleCommand[M any, C Command](r *Registry, of func(*Machine) M, kind Kind, name string, mod Module, decode func(*Reader) C, check func(Command) Result, apply func(M, C, CmdAt) Result) *CommandSpec {
	return RegisterCommand(r, kind, name, mod, decode, check, func(m *Machine, c C, at CmdAt) Result { return apply(of(m), c, at) })
}
