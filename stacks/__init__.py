"""The CDK app of Spotline: one stack built from spotline.resources and the CDK context."""
