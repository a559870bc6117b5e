package kafka

// Admin APIs: the topic, config and cluster management requests that tools
// such as kafka-topics.sh, kafka-configs.sh and kadm send.
// Behavior common to them:
//  * Changes are fsm commands: every change one request asks for is handed
//    to the broker in one Submit, so the commands commit in one block, and
//    the answer is written once that block is committed (or the request's
//    timeout passes: the outcome of a command still pending then is
//    unknown and it gets REQUEST_TIMED_OUT).
//  * validate_only requests run the state machine's own checks
//    (fsm.CheckCommand, then existence and the resulting configs against
//    the committed view) and submit nothing.
//  * Reads are answered from the committed view of the broker asked.
//  * Each API is authorized against the ACLs as Kafka authorizes it (the
//    API's own file says how; acls.go).
// Not done: request policies (create.topic.policy.class.name and the
// like), throttling (throttle_ms is always 0).

import (
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm"
)

// adminRoutes are the admin APIs, one file each (config APIs share configs.go).
// Ranges stay within what kmsg v1.15.1 encodes.
func adminRoutes() []route {
	return []route{
		{key: 19, min: 2, max: 7, handle: handleCreateTopics},
		{key: 20, min: 1, max: 6, handle: handleDeleteTopics},
		{key: 21, min: 0, max: 2, handle: handleDeleteRecords},
		{key: 23, min: 0, max: 4, handle: handleOffsetForLeaderEpoch},
		{key: 32, min: 0, max: 4, handle: handleDescribeConfigs},
		{key: 33, min: 0, max: 2, handle: handleAlterConfigs},
		{key: 35, min: 0, max: 4, handle: handleDescribeLogDirs},
		{key: 37, min: 0, max: 3, handle: handleCreatePartitions},
		{key: 44, min: 0, max: 1, handle: handleIncrementalAlterConfigs},
		{key: 60, min: 0, max: 2, handle: handleDescribeCluster},
	}
}

// problem is a Kafka error code with the message that explains it. The zero
// value means no problem.
type problem struct {
	code int16
	msg  string
}

func (p problem) failed() bool { return p.code != 0 }

// message is p's message for a response's nullable error_message field.
func (p problem) message() *string {
	if p.code == 0 {
		return nil
	}
	m := p.msg
	return &m
}

func newProblem(err *kerr.Error, msg string) problem { return problem{code: err.Code, msg: msg} }

// checked runs fsm.CheckCommand, the checks every broker makes before
// ordering a command, and returns what it refuses.
func checked(cmd fsm.Command) problem {
	if r := fsm.CheckCommand(cmd); r.Code != 0 {
		return problem{code: r.Code, msg: r.Message}
	}
	return problem{}
}

// fromOutcome turns a submitted command's outcome into a problem.
func fromOutcome(o outcome) problem {
	if o.Code == 0 {
		return problem{}
	}
	p := problem{code: o.Code}
	if o.msg != nil {
		p.msg = *o.msg
	}
	return p
}

// counts returns how many times each string occurs.
func counts(names []string) map[string]int {
	n := make(map[string]int, len(names))
	for _, s := range names {
		n[s]++
	}
	return n
}
