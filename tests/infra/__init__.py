"""Infrastructure tests: the synthesized CDK stack and its building blocks."""
