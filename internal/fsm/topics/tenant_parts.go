package topics

import "github.com/stele-io/stele/internal/fsm/core"

// What the topics module keeps of a tenant (issue 18, docs/tenants.md),
// for the tenants module: the topics named tenant~topic (core/names.go),
// which only exist while the tenant does.

// indexTopic adds t to its tenant's topics (byTenant), if it has a tenant,
// and drops the view index (views.go).
func (f *Topics) indexTopic(t *Topic) {
	f.viewsChanged()
	tenant, _ := core.SplitTenant(t.Name)
	if tenant == "" {
		return
	}
	own := f.byTenant[tenant]
	if own == nil {
		own = map[string]*Topic{}
		f.byTenant[tenant] = own
	}
	own[t.Name] = t
}

// unindexTopic removes t from its tenant's topics.
func (f *Topics) unindexTopic(t *Topic) {
	f.viewsChanged()
	tenant, _ := core.SplitTenant(t.Name)
	if own := f.byTenant[tenant]; own != nil {
		delete(own, t.Name)
		if len(own) == 0 {
			delete(f.byTenant, tenant)
		}
	}
}

// TenantTopics returns the live topics of tenant, sorted by name.
func (f *Topics) TenantTopics(tenant string) []*Topic {
	own := f.byTenant[tenant]
	out := make([]*Topic, 0, len(own))
	for _, name := range core.SortedKeys(own) {
		out = append(out, own[name])
	}
	return out
}

// TenantUsage returns how many live topics tenant has and how many
// partitions they have in all.
func (f *Topics) TenantUsage(tenant string) (topics, partitions int64) {
	for _, t := range f.byTenant[tenant] { // sums: the order does not matter
		topics++
		partitions += int64(len(t.Partitions))
	}
	return topics, partitions
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
