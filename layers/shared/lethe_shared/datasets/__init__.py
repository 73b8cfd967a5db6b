"""Datasets: the dataset document and the registry that stores them."""
