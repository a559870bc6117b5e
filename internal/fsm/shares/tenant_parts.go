package shares

import "github.com/stele-io/stele/internal/fsm/core"

// What the share groups module keeps of a tenant (issue 18,
// docs/tenants.md), for the tenants module: the share groups whose names
// read as the tenant's (tenant~group, core/names.go), with their members,
// share partitions and configs.

// RemoveTenantGroups removes the tenant's share groups; a member of a
// removed group learns it at its next request (GROUP_ID_NOT_FOUND or
// UNKNOWN_MEMBER_ID). It returns how many it removed.
func (f *Shares) RemoveTenantGroups(tenant string) int {
	n := 0
	for _, name := range core.SortedKeys(f.byName) {
		if t, _ := core.SplitTenant(name); t != tenant {
			continue
		}
		g := f.byName[name]
		for _, k := range sortedParts(g.Parts) {
			f.dirty.part(name, k)
		}
		clear(g.Parts)
		clear(g.Configs)
		clear(g.Members) // stage removes the group, now empty
		f.dirty.group(name)
		n++
	}
	return n
}

// TenantGroups is how many share groups the tenant has (the tenants
// module's groups quota counts them from app version 16).
func (f *Shares) TenantGroups(tenant string) int64 {
	var n int64
	for name := range f.byName { // a count: the order does not matter
		if t, _ := core.SplitTenant(name); t == tenant {
			n++
		}
	}
	return n
}

// GroupOf is the share group a command of the module names ("" for a
// command of another module).
func GroupOf(c core.Command) string {
	switch c := c.(type) {
	case ShareGroupHeartbeat:
		return c.Group
	case ShareAcquire:
		return c.Group
	case FilteredAcquire:
		return c.Group
	case SetShareGroupConfigs:
		return c.Group
	case DeleteShareGroup:
		return c.Group
	case AlterShareOffsets:
		return c.Group
	case DeleteShareOffsets:
		return c.Group
	}
	return ""
}
