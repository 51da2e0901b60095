"""Client layer: producer, consumer group session, exact range reads. Built on net + wire."""
