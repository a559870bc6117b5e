package fsm

import "sort"

// The topics module's steps: its state into the block's batch (the
// deleted topics' keys, the changed topics and partitions) and its view.

func init() {
	registerStep(moduleStep{rank: 60, name: "topics and partitions", module: modTopics, stage: stageTopics})
	registerStep(moduleStep{rank: 5, name: "partitions and the topics view", module: modTopics, publish: publishTopics})
}

func stageTopics(f *FSM, b *stateBatch) error {
	for _, t := range f.deleted {
		for _, h := range topicDropped.hooks {
			h.fn(f, t, b)
		}
		b.DeletePrefix(batchProofPrefix(t.ID))
		b.DeletePrefix(producerPrefix(t.Name))
		b.DeletePrefix(abortedPrefix(t.Name))
		b.Delete(topicKey(t.Name))
		for _, p := range t.Partitions {
			b.Delete(partitionKey(t.Name, p.Index))
		}
	}
	names := make([]string, 0, len(f.dirtyTopics))
	for n := range f.dirtyTopics {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if t := f.topics[n]; t != nil {
			b.Set(topicKey(n), encodeTopic(t))
		}
	}
	for p := range f.dirtyParts {
		w := &writer{}
		w.u8(persistVersion)
		w.i64(p.next)
		w.i64(p.start)
		w.i64(p.cleanedUpTo)
		w.i64(p.compactHorizon)
		w.i64(p.compactedAt)
		b.Set(partitionKey(p.Topic, p.Index), w.b)
	}
	return nil
}

// publishTopics makes the committed partition offsets, producer and
// transaction state and the topics view visible.
func publishTopics(f *FSM, metaChanged bool) {
	for p := range f.dirtyParts {
		p.hwm.Store(p.next)
		p.lso.Store(p.start)
		if len(p.dirtyProducers) > 0 || p.producersView.Load() == nil {
			p.publishProducers()
		}
		p.publishTxnState()
	}
	for _, t := range f.deleted {
		for _, p := range t.Partitions {
			p.removed.Store(true)
		}
	}
	if metaChanged || f.view.Load() == nil {
		f.view.Store(buildView(f.height, f.topics))
	}
}
