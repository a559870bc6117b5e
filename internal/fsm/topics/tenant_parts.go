package topics

import "github.com/stele-io/stele/internal/fsm/core"

// What the topics module keeps of a tenant (issue 18, docs/tenants.md),
// for the tenants module: the topics named tenant~topic (core/names.go),
// which only exist while the tenant does.

// TenantTopics returns the live topics of tenant, sorted by name.
func (f *Topics) TenantTopics(tenant string) []*Topic {
	var out []*Topic
	for _, name := range core.SortedKeys(f.ByName) {
		if t, _ := core.SplitTenant(name); t == tenant && tenant != "" {
			out = append(out, f.ByName[name])
		}
	}
	return out
}

// RemoveTenantTopics deletes every topic of tenant as DeleteTopic does:
// its partitions' files go once the block commits, and the modules above
// forget what they kept of it (the TopicDeleted hooks). It returns how
// many topics and partitions it deleted.
func (f *Topics) RemoveTenantTopics(tenant string) (topics, partitions int) {
	for _, t := range f.TenantTopics(tenant) {
		partitions += len(t.Partitions)
		f.deleteTopic(DeleteTopic{Name: t.Name})
		topics++
	}
	return topics, partitions
}
