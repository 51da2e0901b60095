"""RocketMQ clients: name-server routes, offsets, exact pull ranges, batch producer, pop consumer."""
