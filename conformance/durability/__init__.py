"""A run that survives its kernel: where the state lives (`state`), the write-ahead record of the
call in flight (`wal`), the per-call time limit (`watchdog`), crash recovery (`crashes`), device
faults that end a worker (`device_fault`), inputs written by the kernel (`input_guard`) and the
run's JSON-lines logs (`jsonlines`)."""
