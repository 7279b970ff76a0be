"""What the server adds to the aggregate: central and distributed Gaussian noise
(:mod:`.server_dp`) and adaptive clip rules (:mod:`.adaptive`)."""
