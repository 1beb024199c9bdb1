"""The daily sequence (``tcgexp-sequence``): one training phase per day, each continuing the canonical model."""
