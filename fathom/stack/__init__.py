"""Server stacks and the main job: supervised children, what a restarted server forgot, CPU fences and pinning,
the launch plan, and servers run inside this process."""
