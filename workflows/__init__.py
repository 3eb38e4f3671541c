"""The five workflow definitions: input contract, canonical form, lane rule and stages."""
