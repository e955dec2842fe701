"""ConcretePlant (paper Sec. 2.2, App. A): keyword mining, concreteness-aware sampling, caption rewriting and hard-negative images."""
