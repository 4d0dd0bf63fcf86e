"""Fleet scale: many runners, one search, on engines the field already runs.

The CI system fans the work out (`shards`: `--shard i/n`, or its own variables); a Redis or
Valkey server holds what runners share: Hypothesis's stock RedisExampleDatabase under a
namespace per (kernel, numerics profile, device architecture, Hypothesis version) behind a
fail-soft layer (`store`, `breaker`, `namespace`, `database`), an inbox of failures keyed by
content hash with their finders (`inbox`), and a lease per failure group (`lease`). `runner`
is what one runner does with them (push a failure the moment it exists, take a lease, say how
the store fared); `push` drains what a run could not push; `collect` turns the inbox and
runners' artifact folders into one pending entry per failure group. The corpus in git stays the
record: nothing here writes outside the pending folder and the state folder.

The package imports the core (durability, judging, records), never a front end; redis-py (the
`fleet` extra) is imported only where a store is used.
"""
