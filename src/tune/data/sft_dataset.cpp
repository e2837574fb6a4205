// placeholder: implemented by the owner of src/tune/data
