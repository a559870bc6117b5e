#!/usr/bin/env python3
"""height_breakdown.py LOG: where the time of one CometBFT height goes.

LOG is the output of `stele cluster up --dir DIR -- --log-level debug
--log-format json` (each line "[nodeI] {json}"). For every broker it takes
the first time of each consensus step log line per height (new round,
propose, proposal received, prevote, precommit, commit, FinalizeBlock,
Commit) and prints the median and 90th percentile of each step's duration
and of the whole height (docs/benchmarks.md, "Where the time of one height
goes").
"""
import json, sys, statistics, re
from datetime import datetime
# per node: height -> {event: first time}
events = {}
keys = {
 'entering new round': 'new_round', 'entering propose step': 'propose', 'received proposal': 'got_proposal',
 'received complete proposal block': 'got_block', 'entering prevote step': 'prevote', 'entering precommit step': 'precommit',
 'entering commit step': 'commit', 'finalizing commit of block': 'finalizing', 'finalized block': 'finalized',
 'executed block': 'executed', 'committed state': 'committed',
}
def ts(s):
    return datetime.fromisoformat(s.replace('Z','+00:00')).timestamp()
for line in open(sys.argv[1]):
    m = re.match(r'^\[(node\d)\] (\{.*\})\s*$', line)
    if not m: continue
    node, js = m.groups()
    try: d = json.loads(js)
    except Exception: continue
    msg = d.get('msg','')
    if not isinstance(msg, str): continue
    k = None
    k = keys.get(msg)
    if not k: continue
    h = d.get('height')
    if h is None and isinstance(d.get('proposal'), dict): h = d['proposal'].get('height')
    if h is None: continue
    try: h = int(h)
    except: continue
    ev = events.setdefault(node, {}).setdefault(h, {})
    ev.setdefault(k, ts(d['time']))
order = ['new_round','propose','got_proposal','got_block','prevote','precommit','commit','finalizing','finalized','executed','committed']
for node in sorted(events):
    hs = events[node]
    spans = {}
    for h, ev in hs.items():
        prev = None
        for k in order:
            if k in ev:
                if prev is not None:
                    spans.setdefault(f'{prev}->{k}', []).append((ev[k]-ev[prev])*1000)
                prev = k
        if 'new_round' in ev and h+1 in hs and 'new_round' in hs[h+1]:
            spans.setdefault('height (new_round->next new_round)', []).append((hs[h+1]['new_round']-ev['new_round'])*1000)
    print(node, len(hs), 'heights')
    for k, v in spans.items():
        if len(v) >= 5:
            print(f'  {k:45s} n={len(v):4d} p50={statistics.median(v):8.1f} ms  p90={sorted(v)[int(len(v)*0.9)]:8.1f} ms')
