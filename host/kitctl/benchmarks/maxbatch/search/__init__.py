"""The max-batch search, as pure functions of the trials so far: the protocol strategy and its rules
(protocol.py), the guided one built on them (guided.py), the two by name (strategies.py), and the speculative
scheduling of candidates across slots and GPUs (speculate.py). Max batch is their only user."""
