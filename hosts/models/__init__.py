"""Host networks and the model that routes them through seed slots (BEHAVIOUR §3).

    cnn.py            CNNHost: the image host, its injection points between blocks
    transformer.py    TransformerHost: the language-model host, injection points between layers
    layout.py         InjectionSpec (one injection point: slot id, width, position) and the channels_last layout
    morphogenetic.py  MorphogeneticModel: a host plus its SeedSlots, routed in position order
    flops.py          FLOPs of a network per sample, counted from its layers' shapes
"""
