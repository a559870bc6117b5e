package kafka

// DescribeLogDirs: v0-4
// Behavior:
//  * Authorization (acls.go): DESCRIBE on the cluster, as Kafka; without it
//    no directory is described (CLUSTER_AUTHORIZATION_FAILED from v3).
//  * One log directory, Options.DataDir (made absolute), holds every
//    partition. A null topic list describes every partition; otherwise the
//    partitions asked for that exist (unknown ones are left out, as Kafka
//    leaves out partitions a directory does not hold).
//  * A partition's size is its bytes on disk; its offset lag is 0 (every
//    broker's log is its committed log; there are no future replicas).
//  * v4 reports the total and usable bytes of the directory's file system
//    (statfs), or -1 where the platform cannot tell.
// Not done: v5's cordoned log directories (KIP-1066); several log
// directories; AlterReplicaLogDirs.

import (
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func handleDescribeLogDirs(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DescribeLogDirsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	if !c.clusterAllowed(kmsg.ACLOperationDescribe) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code // v3+; before, an empty answer
		return done(resp), nil
	}
	view := c.s.b.View()

	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir = c.s.opts.DataDir
	if dir.Dir != "" {
		if abs, err := filepath.Abs(dir.Dir); err == nil {
			dir.Dir = abs
		}
		dir.TotalBytes, dir.UsableBytes = diskSpace(dir.Dir)
	}
	hide := c.hidesTenants()
	add := func(t *fsm.TopicView, parts []*fsm.Partition) {
		if len(parts) == 0 || hide && c.foreign(t.Name) {
			return // a tenant's topics are not the default tenant's (tenants.go)
		}
		dt := kmsg.NewDescribeLogDirsResponseDirTopic()
		dt.Topic = t.Name
		for _, p := range parts {
			dp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
			dp.Partition = p.Index
			dp.Size = p.Size()
			dt.Partitions = append(dt.Partitions, dp)
		}
		dir.Topics = append(dir.Topics, dt)
	}
	if r.Topics == nil {
		for _, t := range view.Topics() {
			add(t, t.Partitions)
		}
	} else {
		for _, rt := range r.Topics {
			t := view.Topic(rt.Topic)
			if t == nil {
				continue
			}
			var parts []*fsm.Partition
			for _, idx := range rt.Partitions {
				if idx >= 0 && int(idx) < len(t.Partitions) {
					parts = append(parts, t.Partitions[idx])
				}
			}
			add(t, parts)
		}
	}
	resp.Dirs = []kmsg.DescribeLogDirsResponseDir{dir}
	return done(resp), nil
}
