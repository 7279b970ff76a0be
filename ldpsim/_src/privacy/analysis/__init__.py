"""Studies built on the randomizers: noise averaging (:mod:`.averaging`) and the mechanism
frontier (:mod:`.frontier`)."""
