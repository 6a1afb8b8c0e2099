// entgraph: capture reader and writer (being written).
