// entgraph: safetensors reader (being written).
