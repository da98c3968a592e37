"""Lambda entry points: one thin module per function in `spotline.aws.resources.FUNCTIONS`.

Each parses its event, makes one call into `spotline.control`, and reports metrics; the
Powertools objects and the control plane come from `spotline.aws.lambda_runtime`.
"""
