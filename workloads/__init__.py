"""What is sent: token-exact request plans, arrival processes, traces and the prefix oracle.

Entry points (import them from their modules; this package imports nothing eagerly so
that ``workloads.prefix`` stays cheap for the engine):

* ``workloads.spec.load_spec(workload, overrides) -> WorkloadSpec`` and
  ``workloads.build.build_plan(spec, tokenizer=None) -> Plan``
* ``workloads.stats.plan_stats(plan, block_size=None, num_blocks=None) -> dict``
* ``workloads.oracle.PrefixOracle`` and ``workloads.oracle.annotate(plan, ...) -> Plan`` (a copy:
  plans are frozen)
* ``workloads.multi_turn.next_prompt(prev_full, returned_token_ids, spec) -> Prompt``
* ``workloads.tokenizer.load_tokenizer(source) -> Tokenizer``
"""
