"""The CDK app of Spotline: one stack built from spotline.aws.resources and the CDK context."""
