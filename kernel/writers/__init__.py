"""Engine writers of fp8_ds_mla records: records written by a serving engine's own code (the
project's writers, pow2 / pow2-floor / raw, are kernel.record.encode_records). Each module holds
one engine writer, its availability on this machine and a check of what it wrote."""
