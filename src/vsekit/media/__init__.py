"""media"""
